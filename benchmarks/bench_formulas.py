"""What the classic readability formulas (`features.formulas`) add to the cost of
`featurize`, on CommonLit excerpts (their agreement with other implementations:
`benchmarks/formula_peers.py`).

    python benchmarks/bench_formulas.py [--data train.csv] [--batch-size 64] [--rounds 7]

Batches of consecutive excerpts (64 by default), timed in interleaved rounds (featurize
alone; featurize and the formulas in one pass, what the `featurize` step serves; the
formulas with their own pass over the text); each figure is the median over the rounds of
the time per batch, the percentages the medians of the per-round ratios to featurize.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np

from readability_triton import features
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.features import formulas
from readability_triton.features.extract import featurize_with_formulas


def speed(texts: list[str], args) -> int:
    try:
        vocabulary = features.build_vocabulary(texts)
    except ImportError:  # no scikit-learn for the default stop words: none (featurize costs about the same)
        vocabulary = features.build_vocabulary(texts, stopwords=())
    model = formulas.Formulas.load()
    count = max(1, args.texts // args.batch_size)
    batches = [
        [texts[(i * args.batch_size + j) % len(texts)].encode("utf-8") for j in range(args.batch_size)]
        for i in range(count)
    ]
    for batch in batches:  # the one-pass path (what featurize serves) equals the parts
        feats, both = featurize_with_formulas(batch, vocabulary, model)
        assert np.array_equal(feats, features.featurize(batch, vocabulary))
        assert np.array_equal(both, model(batch), equal_nan=True)
    runs = {
        "featurize": lambda: [features.featurize(b, vocabulary) for b in batches],
        "featurize + formulas in one pass (served)": lambda: [
            featurize_with_formulas(b, vocabulary, model) for b in batches
        ],
        "formulas alone (own pass)": lambda: [model(b) for b in batches],
    }
    per_batch: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up
    for _ in range(args.rounds):
        for name, run in runs.items():
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < args.min_seconds:
                run()
                done += 1
            per_batch[name].append((time.perf_counter() - start) / (done * count))
    print(
        f"{count} batches of {args.batch_size} excerpts of {args.data}, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, numpy {np.__version__}, {datetime.date.today()}"
    )
    print("| | ms per batch | % of featurize |")
    print("|---|---:|---:|")
    base = per_batch["featurize"]
    for name, values in per_batch.items():
        ratio = statistics.median(v / b for v, b in zip(values, base))
        print(f"| {name} | {statistics.median(values) * 1e3:.3f} | {100 * ratio:.1f} % |")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", default=os.path.normpath(COMMONLIT_CSV), help="CSV with an excerpt column")
    parser.add_argument("--column", default="excerpt")
    parser.add_argument("--limit", type=int, default=0, help="only the first N excerpts (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--texts", type=int, default=512, help="excerpts per timed run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.3, help="per implementation per round")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.data):
        print(f"no data at {args.data} (pass --data)", file=sys.stderr)
        return 2
    texts = read_table(args.data, args.column).texts
    if args.limit:
        texts = texts[: args.limit]
    return speed(texts, args)


if __name__ == "__main__":
    sys.exit(main())
