"""Throughput of `featurize` (NumPy, and CuPy when a GPU is present) against the plain
per-text reference implementation of the spec, in the same run, on CommonLit excerpts; and
of the served step (features, WORDS and the seven formulas: `served_outputs`) on NumPy and,
with a GPU, on CuPy (the CUDA kernels), with their ratio.

    .venv/bin/python benchmarks/bench_featurize.py [--data train.csv] [--batch-sizes 1,64,2048]
                                             [--rounds 5] [--min-seconds 0.5] [--json out.json]

For every batch size the implementations are timed in interleaved rounds (reference,
NumPy, CuPy, reference, NumPy, ...), so that load from other processes hits them alike;
each cell of the table is the median over the rounds of texts per second, and the
speed-up is the median of the per-round ratios. Batches are consecutive CommonLit
excerpts (cycled). The vocabulary is fitted on all excerpts first. Before timing, the
NumPy (and CuPy) result of the largest batch is checked bit for bit against the
reference, and the served step's CuPy outputs against NumPy's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from readability_triton import features
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.features import reference
from readability_triton.features.extract import served_outputs
from readability_triton.features.formulas import Formulas


def _cupy():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # noqa: BLE001 - no CuPy or no usable GPU
        return None


def _batches(texts: list[str], size: int, count: int) -> list[list[str]]:
    out, at = [], 0
    for _ in range(count):
        out.append([texts[(at + i) % len(texts)] for i in range(size)])
        at = (at + size) % len(texts)
    return out


def _rate(run, batches, min_seconds: float) -> float:
    """Texts per second of `run` over the batches (repeated until min_seconds passed)."""
    done, start = 0, time.perf_counter()
    while True:
        for batch in batches:
            run(batch)
            done += len(batch)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return done / elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.path.normpath(COMMONLIT_CSV), help="CSV with an excerpt column")
    parser.add_argument("--column", default="excerpt")
    parser.add_argument("--batch-sizes", default="1,64,2048")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per batch size")
    parser.add_argument("--min-seconds", type=float, default=0.5, help="minimum time per implementation per round")
    parser.add_argument(
        "--reference-texts",
        type=int,
        default=256,
        help="at least this many texts per reference measurement (it is slow)",
    )
    parser.add_argument("--no-gpu", action="store_true", help="skip CuPy even if a GPU is present")
    parser.add_argument(
        "--vocabulary",
        help="a vocabulary.json to use (default: built from --data, which needs scikit-learn's stop words)",
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)

    if not os.path.isfile(args.data):
        print(f"no data at {args.data} (pass --data)", file=sys.stderr)
        return 2
    texts = read_table(args.data, args.column).texts
    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]
    vocab = features.Vocabulary.load(args.vocabulary) if args.vocabulary else features.build_vocabulary(texts)
    top, bottom, stops = vocab.top, vocab.bottom, vocab.stopwords
    cupy = None if args.no_gpu else _cupy()

    def run_reference(batch):
        reference.featurize(batch, top, bottom, stops)

    def run_numpy(batch):
        features.featurize(batch, vocab)

    formulas = Formulas.load()

    def run_served_numpy(batch):
        served_outputs(batch, vocab, formulas)

    impls = [("reference", run_reference), ("numpy", run_numpy), ("served_numpy", run_served_numpy)]
    if cupy is not None:

        def run_cupy(batch):
            features.featurize(batch, vocab, xp=cupy)
            cupy.cuda.Device().synchronize()

        def run_served_cupy(batch):
            served_outputs(batch, vocab, formulas, xp=cupy)
            cupy.cuda.Device().synchronize()

        impls += [("cupy", run_cupy), ("served_cupy", run_served_cupy)]

    # Correctness first: bit-for-bit equal to the reference on the largest batch.
    check = _batches(texts, max(sizes), 1)[0]
    expected = reference.featurize(check, top, bottom, stops)
    got = {"numpy": features.featurize(check, vocab)}
    if cupy is not None:
        got["cupy"] = cupy.asnumpy(features.featurize(check, vocab, xp=cupy))
    for name, array in got.items():
        if not np.array_equal(array.view(np.uint32), expected.view(np.uint32)):
            print(f"{name} differs from the reference: not benchmarking a wrong result", file=sys.stderr)
            return 1
    if cupy is not None:
        want = served_outputs(check, vocab, formulas)
        for g, w in zip(served_outputs(check, vocab, formulas, xp=cupy), want):
            if not np.array_equal(cupy.asnumpy(g).view(np.uint32), w.view(np.uint32)):
                print("the served step on CuPy differs from NumPy: not benchmarking it", file=sys.stderr)
                return 1

    print(
        f"featurize benchmark: {len(texts)} excerpts from {args.data} "
        f"(mean {statistics.fmean(map(len, texts)):.0f} characters), n={vocab.n}, "
        f"{args.rounds} rounds, {os.cpu_count()} CPUs, numpy {np.__version__}, "
        f"Python {platform.python_version()}" + (f", cupy {cupy.__version__}" if cupy else ", no GPU")
    )
    results = []
    for size in sizes:
        n_batches = max(1, -(-args.reference_texts // size)) if size < args.reference_texts else 1
        batches = _batches(texts, size, n_batches)
        for _, run in impls:  # warm-up (tables, caches, CUDA kernels)
            run(batches[0])
        rates: dict[str, list[float]] = {name: [] for name, _ in impls}
        for _ in range(args.rounds):
            for name, run in impls:
                rates[name].append(_rate(run, batches, args.min_seconds))
        row: dict[str, object] = {"batch_size": size}
        for name, values in rates.items():
            row[name] = statistics.median(values)
            row[f"{name}_rounds"] = values
            if name != "reference":
                row[f"{name}_speedup"] = statistics.median(v / r for v, r in zip(values, rates["reference"]))
        if "served_cupy" in rates:  # the GPU's served step against the CPU's, round by round
            pairs = zip(rates["served_cupy"], rates["served_numpy"])
            row["served_gpu_vs_cpu"] = statistics.median(g / c for g, c in pairs)
        results.append(row)

    names = [name for name, _ in impls]
    header = f"{'batch':>6} | " + " | ".join(f"{name + ' texts/s':>17}" for name in names)
    header += "".join(f" | {name + ' speed-up':>16}" for name in names[1:])
    print(header)
    print("-" * len(header))
    for row in results:
        line = f"{row['batch_size']:>6} | " + " | ".join(f"{row[name]:>17,.0f}" for name in names)
        line += "".join(f" | {row[name + '_speedup']:>15.1f}x" for name in names[1:])
        if "served_gpu_vs_cpu" in row:
            line += f" | served GPU/CPU {row['served_gpu_vs_cpu']:.1f}x"
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"data": args.data, "rounds": args.rounds, "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
