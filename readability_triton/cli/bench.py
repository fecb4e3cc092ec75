"""CLI: `bench` (load, a per-model breakdown and the in-process comparison) and `perf-input`
(an input-data file for perf_analyzer and Model Analyzer)."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from .. import contracts as C
from ..client.readability import triton_client
from ..corpus import default_texts, first_sentences
from ..data import read_table
from ..errors import CommandError, ServerError
from ..measure import bench, perf
from ..pipeline import Pipeline
from ..repository.assemble import repository_pipeline, served_bert
from ..server.canary_probe import check
from ..server.serve import local_server
from ..texts import as_utf8
from .common import connection_arguments, progress, server_url


def _ints(value: str, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise CommandError(f"{what} {value!r}: give comma-separated whole numbers, e.g. 1,4,16") from None
    if not out or min(out) < 1:
        raise CommandError(f"{what} {value!r}: every value must be at least 1")
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="closed-loop load on the ensemble, a per-model breakdown, and the in-process comparison",
        description="Keep CONCURRENCY requests of TEXTS_PER_REQUEST real excerpts in flight for DURATION seconds, "
        "for each combination; per row: texts/s, latency p50/p95/p99 and errors, and from Triton's "
        "statistics extension, per composing model: requests, executions, average batch size, queue "
        "and compute (input/infer/output) time per request and per execution. The same artifacts "
        "run in process in the same run (one thread), for the served/in-process ratio. Against a "
        "running server (--url; --artifacts for the in-process row) or a repository it serves "
        "itself (--repository).",
    )
    target = p.add_mutually_exclusive_group(required=True)
    connection_arguments(p, target, "a running server")
    target.add_argument("--repository", metavar="DIR", help="an assembled repository to serve (portable profile)")
    p.add_argument("--concurrency", default="1,4,16", help="concurrent clients, comma-separated (default 1,4,16)")
    p.add_argument("--texts-per-request", default="1", help="texts per request, comma-separated (default 1)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per row (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before each row (default 2)")
    p.add_argument(
        "--data",
        default=None,
        metavar="CSV",
        help="texts to send (default: the shared CommonLit excerpts, else a generated corpus)",
    )
    p.add_argument("--column", default="excerpt", help="text column of --data (default: excerpt)")
    p.add_argument(
        "--short",
        action="store_true",
        help="send each text's first sentence instead (short texts: the CommonLit excerpts' first sentences "
        "average 29 BERT tokens, the excerpts 217), to measure what the sequence-length buckets save",
    )
    p.add_argument(
        "--distinct",
        type=int,
        default=0,
        metavar="N",
        help="send only the first N texts, over and over (a repository assembled with --response-cache "
        "then answers repeats from the cache; the breakdown shows bert's hit rate)",
    )
    p.add_argument(
        "--cache-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="with --repository: the server's response cache (as serve --cache-size)",
    )
    p.add_argument("--artifacts", metavar="DIR", help="with --url: the artifact set, for the in-process row")
    p.add_argument(
        "--engine",
        choices=("bench", "both"),
        default="bench",
        help="both: Triton's perf_analyzer (.venv/bin/perf_analyzer, `make` puts it there) also measures "
        "every row of one text per request, right after bench, with the same texts (and its texts/s "
        "against the same in-process rate: the served/in-process ratio with a C++ client)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw throughput, latency and the per-model time")
    p.set_defaults(func=cmd_bench)

    p = subparsers.add_parser(
        "perf-input",
        help="write a perf_analyzer --input-data file of real excerpts",
        description="Write the JSON that perf_analyzer's --input-data (and Model Analyzer's perf_analyzer_flags "
        "input-data) takes: one entry per excerpt, the ensemble's TEXT input as a BYTES tensor of "
        "shape [1].",
    )
    p.add_argument("--data", required=True, metavar="CSV", help="a CSV with a text column")
    p.add_argument("--column", default="excerpt", help="text column (default: excerpt)")
    p.add_argument("--out", required=True, metavar="FILE", help="the JSON file to write")
    p.add_argument("--limit", type=int, default=None, help="at most this many excerpts")
    p.set_defaults(func=cmd_perf_input)


def _texts(path: str | None, column: str) -> list[str]:
    if path is None:
        return default_texts()[0]
    return read_table(path, column).texts


def cmd_bench(args) -> int:
    concurrency = _ints(args.concurrency, "--concurrency")
    per_request = _ints(args.texts_per_request, "--texts-per-request")
    if max(per_request) > 64:
        raise CommandError("--texts-per-request: at most 64 (the ensemble's max_batch_size)")
    if args.duration <= 0:
        raise CommandError("--duration must be positive")
    texts = _texts(args.data, args.column)
    if args.short:
        texts = [t for t in first_sentences(texts) if t.strip()]
    if args.distinct < 0:
        raise CommandError("--distinct must be at least 1 (or 0: every text)")
    if args.distinct:
        texts = texts[: args.distinct]
    if args.artifacts and args.repository:
        raise CommandError(
            "--artifacts goes with --url: with --repository the in-process row runs the repository's own artifacts"
        )
    with contextlib.ExitStack() as stack:
        if args.repository:
            pipeline = repository_pipeline(args.repository)
            served_words: str | None = served_bert(args.repository)
            print(
                f"served bert: {served_words}; in process: {pipeline.bert.describe()}",
                file=sys.stderr,
                flush=True,
            )
            try:
                server = stack.enter_context(
                    local_server(
                        args.repository,
                        os.path.join(args.repository.rstrip("/") + ".bench.log"),
                        cache_size=args.cache_size,
                    )
                )
            except ServerError as err:
                raise CommandError(str(err)) from None
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
        else:
            url = server_url(args)
            health = check(url, args.protocol, timeout=30.0)
            if not health.ok:
                raise CommandError(
                    f"--url {url} ({args.protocol}): the ensemble does not answer ({health.message}); "
                    "start a server (readability-triton serve) or pass --repository DIR"
                )
            pipeline = Pipeline.from_folder(args.artifacts) if args.artifacts else None
            served_words = None
            if pipeline is None:
                print("no --artifacts: the in-process row is left out", file=sys.stderr)
            else:
                served_words = served_bert_config(url, args.protocol)
                print(
                    f"served bert: {served_words or 'not known'}; in process: {pipeline.bert.describe()}",
                    file=sys.stderr,
                )
        perf_input = None
        if args.engine == "both":
            import shutil
            import tempfile

            binary = shutil.which("perf_analyzer") or os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
            if not os.path.isfile(binary):
                raise CommandError("--engine both: no perf_analyzer (scripts/perf_analyzer.sh puts it into the venv)")
            descriptor, perf_input = tempfile.mkstemp(prefix="perf-input-", suffix=".json")
            with os.fdopen(descriptor, "w", encoding="utf-8") as document:
                json.dump(perf.perf_input(texts), document, ensure_ascii=False)
        try:
            rows = bench.run(
                url,
                args.protocol,
                texts,
                concurrency,
                per_request,
                args.duration,
                pipeline,
                args.warmup,
                progress=progress,
                perf_analyzer_input=perf_input,
                perf_analyzer_binary=binary if perf_input else "perf_analyzer",
            )
        finally:
            if perf_input:
                os.remove(perf_input)
    print(
        f"\nbench: {args.protocol} at {url}, {len(texts)} distinct {'short ' if args.short else ''}texts, "
        f"{args.duration:g} s per row, "
        f"{os.cpu_count()} CPUs\n"
    )
    bench.print_rows(rows, sys.stdout)
    note = bench.ratio_note(
        rows,
        pipeline.bert.describe() if pipeline is not None else None,
        served_words,
    )
    if note:
        print("\n" + note)
    report = {
        "protocol": args.protocol,
        "url": url,
        "duration": args.duration,
        "cpus": os.cpu_count(),
        **bench.summary(rows),
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
        print(f"\nwrote {args.json}", file=sys.stderr)
    if args.plot:
        bench.plot(rows, args.plot, title=f"readability ensemble, {args.protocol}, {os.cpu_count()} CPUs")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def served_bert_config(url: str, protocol: str) -> str | None:
    """The served bert's backend (or platform) and instances, from the server's model
    configuration, or None where the server does not say."""
    try:
        _, client = triton_client(url, protocol, timeout=10.0)
        try:
            config = client.get_model_config(C.BERT) if protocol == "http" else None
            if config is None:
                config = client.get_model_config(C.BERT, as_json=True)["config"]
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - a fused repository has no bert; an older server: not known
        return None
    engine = config.get("platform") or config.get("backend") or "?"
    return f"Triton's {engine} backend" if config.get("backend") != "python" else "a Python model"


def cmd_perf_input(args) -> int:
    texts = _texts(args.data, args.column)
    if args.limit is not None:
        if args.limit < 1:
            raise CommandError("--limit must be at least 1")
        texts = texts[: args.limit]
    try:
        as_utf8(texts)
    except ValueError as err:
        raise CommandError(f"{args.data}: {err}") from None
    document = perf.perf_input(texts)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False)
    print(
        f"wrote {args.out}: {len(texts)} excerpts for perf_analyzer --input-data (TEXT, BYTES, shape [1])",
        file=sys.stderr,
    )
    return 0
