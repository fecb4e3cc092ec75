"""Training and building artifact sets: everything the serving side never imports
(tests/test_layering.py checks it by this package's name). Importing this package imports
none of its modules.

- `bert`: `train-bert` (fine-tuning, cross-validation); `bert_checkpoint`: the checkpoint's
  files; `bert_export`: `export-bert` (trace or export, verify against eager PyTorch, write
  `model.pt` / `model.onnx` and the tokenizer files); `bert_verify`: that verification;
  `ridge_head`: a frozen encoder + a ridge-regression head (what `build-demo` builds);
- `forest`: `train-forest` (scikit-learn, cross-validation, the Treelite checkpoint written);
- `blend`: `train-blend` (SCORE's fitted weights and its interval's calibration);
- `demo`: `build-demo` (the whole set, on the CommonLit data or a generated corpus).

The sets' layout and `manifest.json` are `layout`'s; what they compute in process is
`pipeline.Pipeline`'s; the runners the served models run are in `bert`, `forest`,
`features` and `tokenizer`.
"""
