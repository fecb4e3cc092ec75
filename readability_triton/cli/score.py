"""CLI: `score` (texts through a running server's ensemble) and `demo` (build, assemble,
serve, score the example texts, stop)."""

from __future__ import annotations

import csv
import os
import sys

from .. import contracts
from ..client.readability import ReadabilityClient, parse_outputs
from ..data import COMMONLIT_CSV, read_table
from ..errors import CommandError, ServerError
from ..repository.assemble import assemble, served_bert
from ..server.installation import native_backends
from ..server.serve import local_server
from .common import connection_arguments, progress, protocol_argument, server_url
from .training import ensure_demo_artifacts

#: Texts of clearly different difficulty, written for this demo.
DEMO_TEXTS = (
    "The cat sat on the mat. It was a warm day. The cat was happy and went to sleep in the sun.",
    "Tom and his sister ran down to the lake after lunch. They threw small stones into the water and "
    "counted the rings until their mother called them home for supper.",
    "The city council voted on Tuesday to extend the bus line to the new hospital, a change that "
    "officials said would shorten many patients' trips by half an hour.",
    "Photosynthesis converts light energy into chemical energy: chlorophyll absorbs photons, and the "
    "resulting electron transport drives the synthesis of ATP and NADPH, which the Calvin cycle then "
    "consumes to fix atmospheric carbon dioxide into carbohydrates.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor against "
    "any liability, howsoever arising, consequent upon the lessee's failure to observe covenants "
    "hereinbefore enumerated, save insofar as such liability proceeds from the lessor's negligence.",
)


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
        "--outputs",
        default=",".join(contracts.OUTPUTS),
        help=("the ensemble outputs to ask for, comma-separated (default: all: " + ", ".join(contracts.OUTPUTS) + ")"),
    )
    p.set_defaults(func=cmd_score)

    p = subparsers.add_parser(
        "demo",
        help="build demo artifacts, serve them, score example texts, stop",
        description="Build (or reuse) demo artifacts, assemble them (the cpu profile where Triton's own "
        "backends are built, `make native-backends`; else portable), start a real tritonserver "
        "on 127.0.0.1, score example texts through the ensemble, print a table and stop the server.",
    )
    p.add_argument("--artifacts", default=".cache/demo-artifacts", metavar="DIR")
    p.add_argument("--repository", default=".cache/demo-repository", metavar="REPO")
    p.add_argument(
        "--data",
        default=None,
        metavar="CSV",
        help="training CSV (default: the shared CommonLit data if present, else a generated corpus)",
    )
    p.add_argument("--bert", choices=("minilm", "tiny"), default="minilm")
    protocol_argument(p)
    p.set_defaults(func=cmd_demo)


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
    texts = _read_texts(args)
    url = server_url(args)
    with ReadabilityClient(url, args.protocol, batch_size=args.batch_size) as client:
        if not client.ready():
            raise CommandError(
                f"no ready 'readability' model at {url} ({args.protocol}); start one "
                "with `readability-triton serve --repository REPO`"
            )
        scores = client.score(texts, progress=progress, outputs=outputs)
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


# ----------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
    data = args.data
    if data is None and os.path.isfile(COMMONLIT_CSV):
        data = os.path.normpath(COMMONLIT_CSV)
    print(
        f"demo artifacts in {args.artifacts} (BERT branch: {args.bert}; training data: "
        f"{data or 'a corpus generated by readability-triton'})",
        file=sys.stderr,
        flush=True,
    )
    built = ensure_demo_artifacts(args.artifacts, data=data, bert=args.bert)
    info = built.manifest.info
    # The CPU profile of a production deployment (bert on Triton's own onnxruntime backend)
    # where `make native-backends` built it here, else portable. Not for speed: on these 2
    # cores portable, which cuts BERT's padding off, measured faster (docs/performance.md).
    profile = "cpu" if native_backends() else "portable"
    assemble(args.artifacts, args.repository, profile, force=True)
    log_file = os.path.abspath(args.repository.rstrip("/") + ".server.log")
    open(log_file, "w").close()
    print(f"profile {profile}: bert {served_bert(args.repository)}", file=sys.stderr, flush=True)
    try:
        with local_server(args.repository, log_file) as server:
            url = server.http_url if args.protocol == "http" else server.grpc_url
            with ReadabilityClient(url, args.protocol) as client:
                client.score([DEMO_TEXTS[0]])  # warm-up: the first request pays one-time costs in each step
                scores = [client.score([text])[0] for text in DEMO_TEXTS]
    except ServerError as err:
        raise CommandError(str(err)) from None
    code = server.last_stop.get("exit_status")
    print(
        f"\nScores from the 'readability' ensemble ({args.protocol}, profile {profile}, one request per text; "
        "higher = easier, CommonLit scale):\n"
    )
    print_table(scores, latency=True)
    bert, blend = info.get("bert", {}), info.get("blend", {})
    rmse = blend.get("rmse", {})
    print(
        f"\nBERT branch: {bert.get('encoder', args.bert)}. Out-of-fold RMSE on the {blend.get('n_texts')} training "
        f"texts ({bert.get('folds')} folds): BERT {rmse.get('bert', float('nan')):.3f}, forest "
        f"{rmse.get('forest', float('nan')):.3f}, SCORE {rmse.get('score', float('nan')):.3f} with the fitted "
        f"weights SCORE = {blend.get('bert_weight', 0.5):.3f} BERT + {blend.get('forest_weight', 0.5):.3f} forest "
        f"(at 0.5/0.5: {rmse.get('score_at_0.5', float('nan')):.3f})."
    )
    if not info.get("data", {}).get("calibrated", True):
        print(
            "NOTE: trained on a corpus generated by readability-triton (no CommonLit data found): these "
            "scores are illustrative, not CommonLit-calibrated. Pass --data train.csv for real ones."
        )
    print(f"tritonserver (pid {server.pid}) stopped, status {code}.")
    return 0
