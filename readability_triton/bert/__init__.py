"""The BERT branch: regressor modules, TorchScript export (verified against eager PyTorch),
fine-tuning, the ridge head of the demo, and the runner.

- `modules.py`: the regressors behind the `bert` contract, pooling, masks (torch only);
- `export.py`: `export-bert` (trace, verify, write `model.pt` and the tokenizer files);
- `training.py`: `train-bert`;
- `ridge_head.py`: a frozen encoder + a ridge-regression head (what `build-demo` builds);
- `runner.py`: `TorchScriptRunner`, what the portable `bert` model and the in-process
  pipeline run.

Importing a submodule imports torch; this package's `__init__` does not.
"""
