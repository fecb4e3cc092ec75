"""CLI: `score` (texts through a running server's ensemble).

A `score` job's start is part of its cost (many run at once in a batch system): this
module imports the client and nothing that serves, assembles or trains."""

from __future__ import annotations

import csv
import sys

from .. import contracts
from ..client.readability import ReadabilityClient, parse_outputs
from ..data import read_table
from ..errors import CommandError
from .common import connection_arguments, progress, server_url

#: The most texts one request may carry (the ensemble's max_batch_size).
BATCH_LIMIT = contracts.MAX_BATCH_SIZE[contracts.ENSEMBLE]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score",
        help="score texts through the readability ensemble of a running server",
        description="Send texts to the 'readability' ensemble and print (or write) its outputs: the "
        "score, its interval, the branch scores and the seven formulas. Texts come from the arguments, "
        "a CSV file (--csv), or standard input (one text per line).",
    )
    p.add_argument("texts", nargs="*", help="texts to score")
    p.add_argument("--csv", dest="csv_path", metavar="FILE", help="CSV with a text column")
    p.add_argument("--column", default="excerpt", help="text column of --csv (default: excerpt)")
    p.add_argument("--out", metavar="FILE", help="write a CSV with the scores here")
    connection_arguments(p)
    p.add_argument("--batch-size", type=int, default=BATCH_LIMIT, help=f"texts per request (at most {BATCH_LIMIT})")
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="requests in flight at once, each on its own connection (default 1); the scores keep the texts' order",
    )
    p.add_argument(
        "--outputs",
        default=",".join(contracts.OUTPUTS),
        help=("the ensemble outputs to ask for, comma-separated (default: all: " + ", ".join(contracts.OUTPUTS) + ")"),
    )
    p.set_defaults(func=cmd_score)


def _read_texts(args) -> list[str]:
    if args.csv_path:
        return read_table(args.csv_path, args.column).texts
    if args.texts:
        return list(args.texts)
    if sys.stdin.isatty():
        raise CommandError("no texts: give them as arguments, with --csv FILE, or on standard input")
    texts = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise CommandError("standard input holds no text")
    return texts


#: (output, CSV column, table heading), in the table's order: the branch scores, the score
#: and its interval, then the formulas.
_HEADINGS = {
    "BERT_SCORE": "BERT",
    "FOREST_SCORE": "forest",
    "SCORE": "score",
    "SCORE_LOW": "low",
    "SCORE_HIGH": "high",
    "FLESCH_READING_EASE": "FRE",
    "FLESCH_KINCAID_GRADE": "FKGL",
    "GUNNING_FOG": "Fog",
    "SMOG": "SMOG",
    "COLEMAN_LIAU": "CLI",
    "ARI": "ARI",
    "DALE_CHALL": "DaleCh",
}
_COLUMNS = tuple((name, name.lower(), heading) for name, heading in _HEADINGS.items())


def cmd_score(args) -> int:
    if not 1 <= args.batch_size <= BATCH_LIMIT:
        raise CommandError(f"--batch-size must be between 1 and {BATCH_LIMIT} (the ensemble's max_batch_size)")
    try:
        outputs = parse_outputs(args.outputs)
    except ValueError as err:
        raise CommandError(f"--outputs: {err}") from None
    if not 1 <= args.concurrency <= 64:
        raise CommandError("--concurrency must be between 1 and 64")
    texts = _read_texts(args)
    url = server_url(args)
    with ReadabilityClient(url, args.protocol, batch_size=args.batch_size) as client:
        if not client.ready():
            raise CommandError(
                f"no ready 'readability' model at {url} ({args.protocol}); start one "
                "with `readability-triton serve --repository REPO`"
            )
        scores = client.score(texts, progress=progress, outputs=outputs, concurrency=args.concurrency)
    if args.out:
        # CSV columns: text, then the requested outputs in the ensemble's order (score first)
        columns = [c for name in contracts.OUTPUTS for c in _COLUMNS if c[0] == name and name in outputs]
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text"] + [c[1] for c in columns])
            for s in scores:
                writer.writerow([s.text] + [f"{s.values[c[0]]:.6f}" for c in columns])
        print(f"wrote {len(scores)} scores to {args.out}", file=sys.stderr)
    else:
        print_table(scores, outputs=outputs)
    return 0


def print_table(scores, width: int = 60, latency: bool = False, outputs=contracts.OUTPUTS) -> None:
    columns = [c for c in _COLUMNS if c[0] in outputs]
    width = width if len(columns) <= 5 else 30  # a terminal's width for every output
    header = f"{'text':<{width}}" + "".join(f"  {c[2]:>8}" for c in columns)
    if latency:
        header += f"  {'latency':>9}"
    print(header)
    print("-" * len(header))
    for s in scores:
        text = " ".join(s.text.split())
        text = text if len(text) <= width else text[: width - 1] + "…"
        line = f"{text:<{width}}" + "".join(f"  {s.values[c[0]]:>8.3f}" for c in columns)
        if latency:
            line += f"  {s.latency_ms:>6.1f} ms"
        print(line)
