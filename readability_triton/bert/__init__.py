"""The BERT branch as it is served: regressor modules and the runner. Training, export and
the demo's ridge head are `readability_triton.training`'s.

- `modules.py`: the regressors behind the `bert` contract, pooling, masks (torch only);
- `runner.py`: `TorchScriptRunner` and the ONNX Runtime runner, what the portable `bert`
  model and the in-process pipeline run.

Importing a submodule imports torch or ONNX Runtime; this package's `__init__` does not.
"""
