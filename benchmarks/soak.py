"""Soak: N clients, S seconds of mixed good and bad requests against `readability-triton
serve` (the default supervised server, as users run it) on a portable repository.

Each request carries 1 to 64 texts (`--texts-per-request`); 1 request in `--bad-every` holds
an invalid text and must be refused; a request refused as busy is sent again with backoff
(as `ReadabilityClient` does). Every good text's score is known before the load starts.
Prints the restarts serve made, good requests lost (failed after their retries) or answered
wrong, bad requests accepted, texts/s and p99 per minute, and the resident memory of the
server and of every stub at start, after the warm-up, every `--rss-every` s and at the end.
Then it stops serve (SIGTERM: drain, stop) and reports how. Examples:

    python benchmarks/soak.py --artifacts .cache/demo-artifacts          # 8 clients, 5 min, 1-64 texts
    python benchmarks/soak.py --clients 16 --seconds 60 --texts-per-request 1 --protocol http --json soak.json

Without --artifacts it builds the small test artifact set (random 2-layer BERT).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

from readability_triton import contracts as C
from readability_triton.client.readability import ReadabilityClient
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.measure import load
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions

BAD = [b"broken \xff\xfe utf-8", b"", b"   \t  ", b"\xed\xa0\x80 surrogate", b"\xc3"]


def good_texts(n: int = 200) -> list[str]:
    if os.path.isfile(COMMONLIT_CSV):
        return read_table(COMMONLIT_CSV).texts[:n]
    from readability_triton.corpus import generate_corpus

    return generate_corpus(n)[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", help="artifact set to serve (default: build the small test set)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds after which RSS is the baseline")
    parser.add_argument("--bad-every", type=int, default=10, help="1 bad request per N-1 good ones (0: none)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--rss-every", type=float, default=15.0, help="seconds between RSS samples (default 15)")
    parser.add_argument("--texts-per-request", default="1-64", help="texts per request: N or LOW-HIGH (default 1-64)")
    parser.add_argument(
        "--busy-patience",
        type=float,
        default=60.0,
        help="seconds a request refused as busy is retried before it counts as lost (default 60)",
    )
    parser.add_argument("--health-interval", type=float, default=5.0, help="serve's --health-interval (default 5)")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, contextlib.ExitStack() as stack:
        artifacts = args.artifacts
        if artifacts is None:
            from readability_triton.training.demo import build_demo

            artifacts = os.path.join(tmp, "artifacts")
            print("building the small test artifact set ...", file=sys.stderr, flush=True)
            build_demo(
                artifacts,
                bert="tiny",
                max_length=64,
                folds=2,
                corpus_size=240,
                forest_params={"n_estimators": 12, "max_depth": 8},
            )
        repo = os.path.join(tmp, "repository")
        repository.assemble(artifacts, repo, AssemblyOptions("portable"))
        low, _, high = args.texts_per_request.partition("-")
        sizes = (int(low), int(high or low))
        try:
            serve = stack.enter_context(
                launch_serve(repo, tmp, args=["--health-interval", str(args.health_interval)], stop_timeout=300)
            )
        except RuntimeError as err:  # not ready: the end of its log
            raise SystemExit(str(err)) from None
        grpc_url, http_url = serve.grpc, serve.http
        texts = good_texts()
        with ReadabilityClient(grpc_url, "grpc") as client:
            expected = np.array([s.values[C.SCORE] for s in client.score(texts, outputs=(C.SCORE,))])

        def server_pid() -> int:
            return serve.status(timeout=10).get("pid") or 0

        rss = {"start": load.rss_by_process(server_pid())}
        series: list[tuple[float, dict]] = []
        done = threading.Event()

        def sample_after_warmup():
            if not done.wait(args.warmup):
                rss["after_warmup"] = load.rss_by_process(server_pid())

        def sample_every():
            begin = time.monotonic()
            while not done.wait(args.rss_every):
                series.append((round(time.monotonic() - begin, 1), load.rss_by_process(server_pid())))

        samplers = [threading.Thread(target=f, daemon=True) for f in (sample_after_warmup, sample_every)]
        for sampler in samplers:
            sampler.start()
        url = grpc_url if args.protocol == "grpc" else http_url
        work, close = load.mixed_worker(
            url,
            args.protocol,
            texts,
            expected,
            BAD,
            bad_every=args.bad_every,
            sizes=sizes,
            busy_patience=args.busy_patience,
        )
        print(
            f"{args.clients} {args.protocol} clients for {args.seconds:g} s, {args.texts_per_request} texts per "
            f"request, 1 bad request per {max(args.bad_every - 1, 0)} good, against readability-triton serve ...",
            file=sys.stderr,
            flush=True,
        )
        try:
            outcomes = load.closed_loop(work, args.clients, args.seconds)
        finally:
            close()
        done.set()
        for sampler in samplers:
            sampler.join()
        rss["end"] = load.rss_by_process(server_pid())
        health = serve.status(timeout=10)
        alive = serve.returncode is None and bool(health.get("live"))
        with open(serve.server_log, encoding="utf-8", errors="replace") as handle:
            log = handle.read()
        crashes = [
            s
            for s in ("Signal (11)", "terminate called", "not healthy", "incomplete string data", "error_already_set")
            if s in log
        ]
        stopped = time.monotonic()
        code = serve.stop(timeout=300)  # SIGTERM: drain, stop
        serve_said = serve.said()
        report = {
            "clients": args.clients,
            "seconds": args.seconds,
            "protocol": args.protocol,
            "texts_per_request": args.texts_per_request,
            "bad_every": args.bad_every,
            **load.summarize(outcomes, args.seconds),
            "restarts": health.get("restarts"),
            "serve_alive_at_end": alive,
            "crash_signs": crashes,
            "serve_status": code,
            "stop_seconds": round(time.monotonic() - stopped, 1),
            "serve_said": [line for line in serve_said.splitlines() if "serve:" in line or "stopped" in line],
            "rss_kib": rss,
            "rss_series_kib": series,
        }
    print(
        f"\nrequests {report['requests']} ({report['requests_per_s']:.1f}/s): good {report['good']}, "
        f"bad {report['bad']}; texts scored {report['texts_scored']}; serve restarted tritonserver "
        f"{report['restarts']} time(s)"
    )
    print(
        f"good lost (failed after retries) {report['good_failed']}, good with a wrong score {report['good_wrong']}, "
        f"bad accepted {report['bad_accepted']}"
        + (f"; errors: {report['good_errors']}" if report["good_errors"] else "")
    )
    first, last = report["latency_first_ms"], report["latency_last_ms"]
    print(
        f"good latency, first 15 s: p50 {first['p50']:.0f} ms, p99 {first['p99']:.0f} ms; last 15 s: "
        f"p50 {last['p50']:.0f} ms, p99 {last['p99']:.0f} ms"
    )
    print(
        "per minute: "
        + ", ".join(f"{m['texts_per_s']:.1f} texts/s (p99 {m['p99_ms']:.0f} ms)" for m in report["per_minute"])
    )
    print(
        f"serve alive at the end: {report['serve_alive_at_end']}; crash signs in the server log: "
        f"{report['crash_signs'] or 'none'}; SIGTERM: serve exited {report['serve_status']} in "
        f"{report['stop_seconds']} s"
    )
    for line in report["serve_said"][-4:]:
        print(f"  {line}")
    print(f"\n{'process':<22} {'start MiB':>10} {'warm MiB':>10} {'end MiB':>10} {'growth':>8}")
    warm = rss.get("after_warmup", rss["start"])
    for name in rss["start"]:
        a, w, e = rss["start"][name], warm.get(name, 0), rss["end"].get(name, 0)
        growth = f"{(e - w) / w * 100:+.1f}%" if w else "n/a"
        print(f"{name:<22} {a / 1024:>10.1f} {w / 1024:>10.1f} {e / 1024:>10.1f} {growth:>8}")
    if series:
        names = list(rss["start"])
        print(f"\nRSS (MiB) every {args.rss_every:g} s:")
        print(f"{'s':>6} " + " ".join(f"{n[-10:]:>10}" for n in names))
        for at, sample_ in series:
            print(f"{at:>6.0f} " + " ".join(f"{sample_.get(n, 0) / 1024:>10.1f}" for n in names))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    ok = (
        report["good_failed"] == 0
        and report["good_wrong"] == 0
        and report["bad_accepted"] == 0
        and report["serve_alive_at_end"]
        and report["restarts"] == 0
        and report["serve_status"] == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
