"""CLI: `vocabulary` (fit the feature vocabulary) and `features` (compute the 207 features)."""

from __future__ import annotations

import csv
import os
import sys

from ..contracts import VOCABULARY_SIZE
from ..data import DataError, read_table
from ..errors import CommandError
from ..features import Vocabulary, build_vocabulary, featurize
from .common import progress


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "vocabulary",
        help="fit the feature vocabulary (top/bottom words, stop words) on a CSV",
        description="Count the words of every text (the spec's words, in normal form) and write "
        "vocabulary.json: the n most frequent words (top), the n least frequent others "
        "(bottom), and the stop words (scikit-learn's ENGLISH_STOP_WORDS by default).",
    )
    p.add_argument("--data", required=True, metavar="CSV", help="training CSV ('-' for standard input)")
    p.add_argument("--out", required=True, metavar="FILE", help="vocabulary JSON to write")
    p.add_argument("--column", default="excerpt", help="text column (default: excerpt)")
    p.add_argument("--n", type=int, default=None, help="words per list (default 100: 207 features)")
    p.add_argument(
        "--stopwords", metavar="FILE", help="stop words, one per line (default: scikit-learn's ENGLISH_STOP_WORDS)"
    )
    p.set_defaults(func=cmd_vocabulary)

    p = subparsers.add_parser(
        "features",
        help="compute the readability features of the texts of a CSV",
        description="Compute the 7 + 2n readability features of every text of a CSV with a "
        "vocabulary.json and write them as a CSV (one row per input row, in order, with "
        "the feature names as header; an id column is copied when present).",
    )
    p.add_argument("--vocabulary", required=True, metavar="FILE", help="vocabulary.json")
    p.add_argument("--data", required=True, metavar="CSV", help="input CSV ('-' for standard input)")
    p.add_argument("--out", required=True, metavar="FILE", help="output CSV ('-' for standard output)")
    p.add_argument("--column", default="excerpt", help="text column (default: excerpt)")
    p.add_argument(
        "--id-column",
        default="id",
        help="column copied in front of the features when the input has it (default: id; '' for none)",
    )
    p.add_argument("--batch-size", type=int, default=4096, help="texts per featurize call (default 4096)")
    p.add_argument(
        "--device", choices=("cpu", "gpu"), default="cpu", help="cpu: NumPy (default); gpu: CuPy on the current GPU"
    )
    p.set_defaults(func=cmd_features)


def _read(path: str, column: str):
    return read_table(path, column)


def cmd_vocabulary(args) -> int:
    n = VOCABULARY_SIZE if args.n is None else args.n
    if n < 1:
        raise CommandError(f"--n must be at least 1, got {n}")
    stopwords = None
    if args.stopwords:
        try:
            with open(args.stopwords, encoding="utf-8") as handle:
                stopwords = [line.strip() for line in handle if line.strip()]
        except OSError as err:
            raise CommandError(f"{args.stopwords}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise CommandError(f"{args.stopwords}: not UTF-8 text ({err})") from None
    table = _read(args.data, args.column)
    try:
        vocabulary = build_vocabulary(table.texts, n=n, stopwords=stopwords)
    except ValueError as err:  # too few words (a VocabularyError is a ValueError too)
        raise CommandError(f"{args.data}: {err}") from None
    try:
        vocabulary.save(args.out)
    except OSError as err:
        raise CommandError(f"{args.out}: {err.strerror}") from None
    print(
        f"wrote {args.out}: {vocabulary.n} top and {vocabulary.n} bottom words, "
        f"{len(vocabulary.stopwords)} stop words, {vocabulary.n_features} features "
        f"(fitted on {len(table.texts)} texts of {args.data})",
        file=sys.stderr,
    )
    return 0


def cmd_features(args) -> int:
    import numpy as np

    if args.batch_size < 1:
        raise CommandError(f"--batch-size must be at least 1, got {args.batch_size}")
    vocabulary = Vocabulary.load(args.vocabulary)
    xp = np
    if args.device == "gpu":
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA GPU")
        except Exception as exc:  # noqa: BLE001 - no CuPy or no usable GPU
            raise CommandError(f"--device gpu needs CuPy and a CUDA GPU ({exc}); use --device cpu") from None
        xp = cupy
    table = _read(args.data, args.column)
    ids = None  # (standard input can be read only once: no id column from it)
    if args.id_column and args.data != "-":
        ids = _optional_column(args.data, args.id_column)

    header = ([args.id_column] if ids is not None else []) + list(vocabulary.feature_names)
    out = sys.stdout if args.out == "-" else None
    try:
        if out is None:
            directory = os.path.dirname(os.path.abspath(args.out))
            os.makedirs(directory, exist_ok=True)
            out = open(args.out, "w", newline="", encoding="utf-8")
    except OSError as err:
        raise CommandError(f"{args.out}: {err.strerror}") from None
    try:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        texts = table.texts
        with progress(total=len(texts), unit="text", desc="features") as bar:
            for start in range(0, len(texts), args.batch_size):
                stop = min(start + args.batch_size, len(texts))
                try:
                    values = featurize(texts[start:stop], vocabulary, xp=xp)
                except ValueError as err:  # e.g. a text that is not valid Unicode
                    raise CommandError(f"{args.data}: {_shift_index(str(err), start)}") from None
                if xp is not np:
                    values = values.get()  # CuPy -> NumPy
                # %.9g: 9 significant digits give back every float32 exactly.
                cells = np.char.mod("%.9g", values)
                for offset, row in enumerate(cells.tolist()):
                    writer.writerow(([ids[start + offset]] if ids is not None else []) + row)
                bar.update(stop - start)
    finally:
        if out is not sys.stdout:
            out.close()
    if args.out != "-":
        print(f"wrote {args.out}: {len(table.texts)} rows x {vocabulary.n_features} features", file=sys.stderr)
    return 0


def _optional_column(path: str, column: str):
    """The values of `column` if the CSV has it, else None."""

    try:
        return read_table(path, column).texts
    except DataError:
        return None


def _shift_index(message: str, offset: int) -> str:
    """'text 3 is ...' of a batch -> 'text (offset + 3) is ...' of the file (0-based rows)."""
    import re

    match = re.match(r"text (\d+) (.*)", message)
    if not match or offset == 0:
        return message
    return f"text {int(match.group(1)) + offset} {match.group(2)}"
