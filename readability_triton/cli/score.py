"""CLI: `score` (texts through a running server's ensemble).

A `score` job's start is part of its cost (many run at once in a batch system): this
module imports the client and nothing that serves, assembles or trains."""

from __future__ import annotations

import csv
import sys

from .. import contracts
from ..client.readability import ReadabilityClient, TextRefused, parse_outputs
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
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="score every text the server accepts and list the ones it refuses (empty, too long, not UTF-8) by "
        "row, instead of stopping at the first; --out then has an 'error' column",
    )
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


def _read_texts(args) -> tuple[list[str | bytes], list[str]]:
    """The texts, and where each came from, as an error names it: "row 100 (line 203 of
    FILE)", "line 5 of standard input", "text 2"."""
    if args.csv_path:
        table = read_table(args.csv_path, args.column)
        source = "standard input" if table.path == "-" else table.path
        return list(table.texts), [f"row {i} (line {line} of {source})" for i, line in enumerate(table.lines, 1)]
    if args.texts:
        return list(args.texts), [f"text {i}" for i in range(1, len(args.texts) + 1)]
    if sys.stdin.isatty():
        raise CommandError("no texts: give them as arguments, with --csv FILE, or on standard input")
    texts: list[str | bytes] = []
    labels: list[str] = []
    for number, raw in enumerate(sys.stdin.buffer, 1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(line)  # sent as it is: the server refuses it and says why
        labels.append(f"line {number} of standard input")
    if not texts:
        raise CommandError("standard input holds no text")
    return texts, labels


def cmd_score(args) -> int:
    if not 1 <= args.batch_size <= BATCH_LIMIT:
        raise CommandError(f"--batch-size must be between 1 and {BATCH_LIMIT} (the ensemble's max_batch_size)")
    try:
        outputs = parse_outputs(args.outputs)
    except ValueError as err:
        raise CommandError(f"--outputs: {err}") from None
    if not 1 <= args.concurrency <= 64:
        raise CommandError("--concurrency must be between 1 and 64")
    texts, labels = _read_texts(args)
    url = server_url(args)
    with ReadabilityClient(url, args.protocol, batch_size=args.batch_size) as client:
        if not client.ready():
            raise CommandError(
                f"no ready 'readability' model at {url} ({args.protocol}); start one "
                "with `readability-triton serve --repository REPO`"
            )
        try:
            scores = client.score(
                texts, progress=progress, outputs=outputs, concurrency=args.concurrency, skip_bad=args.skip_bad
            )
        except TextRefused as err:
            raise CommandError(
                f"{labels[err.index]}: the server refused it: it {err.reason}; fix or remove it, or pass --skip-bad "
                "to score the others and list every refused one"
                + (f" (nothing was written to {args.out})" if args.out else "")
            ) from None
    if args.out:
        # CSV columns: text, then the requested outputs in the ensemble's order (score first)
        columns = [name for name in contracts.OUTPUTS if name in outputs]
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text"] + [name.lower() for name in columns] + (["error"] if args.skip_bad else []))
            for s in scores:
                values = ["" if s.error else f"{s.values[name]:.6f}" for name in columns]
                writer.writerow([_shown(s.text)] + values + ([s.error or ""] if args.skip_bad else []))
        print(f"wrote {sum(s.error is None for s in scores)} scores to {args.out}", file=sys.stderr)
    else:
        print_table([s for s in scores if s.error is None], outputs=outputs)
    refused = [(label, s.error) for label, s in zip(labels, scores) if s.error]
    if refused:
        print(f"skipped {len(refused)} of {len(scores)} texts the server refused:", file=sys.stderr)
        for label, error in refused:
            print(f"  {label}: it {error}", file=sys.stderr)
    return 0


def _shown(text: str | bytes) -> str:
    """A text as a table or CSV shows it (bytes that are not UTF-8, with U+FFFD)."""
    return text if isinstance(text, str) else text.decode("utf-8", "replace")


def print_table(scores, width: int = 60, latency: bool = False, outputs=contracts.OUTPUTS) -> None:
    columns = [name for name in contracts.HEADING if name in outputs]  # the table's order
    width = width if len(columns) <= 5 else 30  # a terminal's width for every output
    header = f"{'text':<{width}}" + "".join(f"  {contracts.HEADING[name]:>8}" for name in columns)
    if latency:
        header += f"  {'latency':>9}"
    print(header)
    print("-" * len(header))
    for s in scores:
        text = " ".join(_shown(s.text).split())
        text = text if len(text) <= width else text[: width - 1] + "…"
        line = f"{text:<{width}}" + "".join(f"  {s.values[name]:>8.3f}" for name in columns)
        if latency:
            line += f"  {s.latency_ms:>6.1f} ms"
        print(line)
