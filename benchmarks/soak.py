"""Soak: N clients, S seconds of mixed good and bad requests against a served portable
repository, on the real tritonserver.

Prints the failures of good requests (and wrong scores: every good text's score is known
before the load starts), the bad requests accepted, p50/p99 of good requests in the first
and in the last 15 s, and the resident memory of the server and of every stub at start,
after the warm-up and at the end. Then it stops the server (drain, SIGTERM) and reports
how. Examples:

    python benchmarks/soak.py --clients 16 --seconds 120 --protocol grpc
    python benchmarks/soak.py --clients 16 --seconds 60 --protocol http --bad-every 9 --json soak.json

Without --artifacts it builds the small test artifact set (random 2-layer BERT); with
--artifacts DIR (e.g. .cache/demo-artifacts after `make demo`) it serves that set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

from readability_triton import contracts as C
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.triton import load, repository
from readability_triton.triton.client import ReadabilityClient
from readability_triton.triton.server import TritonServer

BAD = [b"broken \xff\xfe utf-8", b"", b"   \t  ", b"\xed\xa0\x80 surrogate", b"\xc3"]


def good_texts(n: int = 200) -> list[str]:
    if os.path.isfile(COMMONLIT_CSV):
        return read_table(COMMONLIT_CSV).texts[:n]
    from readability_triton.artifacts.corpus import generate_corpus

    return generate_corpus(n)[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", help="artifact set to serve (default: build the small test set)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds after which RSS is the baseline")
    parser.add_argument("--bad-every", type=int, default=9, help="1 bad request per N-1 good ones (0: none)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--rss-every", type=float, default=15.0, help="seconds between RSS samples (default 15)")
    parser.add_argument("--unsafe", action="store_true",
                        help="serve the graph without the validate step (each branch refuses bad text itself), "
                             "to see what the validate step prevents")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        artifacts = args.artifacts
        if artifacts is None:
            from readability_triton.artifacts.demo import build_demo

            artifacts = os.path.join(tmp, "artifacts")
            print("building the small test artifact set ...", file=sys.stderr, flush=True)
            build_demo(artifacts, bert="tiny", max_length=64, folds=2, corpus_size=240,
                       forest_params={"n_estimators": 12, "max_depth": 8})
        repo = os.path.join(tmp, "repository")
        if args.unsafe:
            from bench_validation import make_variant

            make_variant(artifacts, repo, "unsafe")
        else:
            repository.assemble(artifacts, repo, "portable")
        server = TritonServer(repo, log_file=os.path.join(tmp, "server.log"))
        server.start(timeout=300)
        texts = good_texts()
        with ReadabilityClient(server.grpc_url, "grpc") as client:
            expected = np.array([client.score([t], outputs=(C.SCORE,))[0].score for t in texts])
        rss = {"start": load.rss_by_process(server.process.pid)}
        series: list[tuple[float, dict]] = []
        done = threading.Event()

        def sample_after_warmup():
            if not done.wait(args.warmup):
                rss["after_warmup"] = load.rss_by_process(server.process.pid)

        def sample_every():
            begin = time.monotonic()
            while not done.wait(args.rss_every):
                series.append((round(time.monotonic() - begin, 1), load.rss_by_process(server.process.pid)))

        samplers = [threading.Thread(target=f, daemon=True) for f in (sample_after_warmup, sample_every)]
        for sampler in samplers:
            sampler.start()
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        work, close = load.mixed_worker(url, args.protocol, texts, expected, BAD, bad_every=args.bad_every)
        print(f"{args.clients} {args.protocol} clients for {args.seconds:g} s (1 bad request per "
              f"{max(args.bad_every - 1, 0)} good) ...", file=sys.stderr, flush=True)
        try:
            outcomes = load.closed_loop(work, args.clients, args.seconds)
        finally:
            close()
        done.set()
        for sampler in samplers:
            sampler.join()
        rss["end"] = load.rss_by_process(server.process.pid)
        alive = server.process.poll() is None
        with open(server.log_file, encoding="utf-8", errors="replace") as handle:
            log = handle.read()
        crashes = [s for s in ("Signal (11)", "terminate called", "not healthy", "incomplete string data",
                               "error_already_set") if s in log]
        code = server.stop()
        report = {"clients": args.clients, "seconds": args.seconds, "protocol": args.protocol,
                  "bad_every": args.bad_every, **load.summarize(outcomes, args.seconds),
                  "server_alive_at_end": alive, "crash_signs": crashes, "stop": server.last_stop,
                  "stop_status": code, "rss_kib": rss, "rss_series_kib": series}
    print(f"\nrequests {report['requests']} ({report['requests_per_s']:.1f}/s): good {report['good']}, "
          f"bad {report['bad']}")
    print(f"good failed {report['good_failed']}, good with a wrong score {report['good_wrong']}, "
          f"bad accepted {report['bad_accepted']}" + (f"; errors: {report['good_errors']}" if report['good_errors']
                                                       else ""))
    first, last = report["latency_first_ms"], report["latency_last_ms"]
    print(f"good latency, first 15 s: p50 {first['p50']:.0f} ms, p99 {first['p99']:.0f} ms; last 15 s: "
          f"p50 {last['p50']:.0f} ms, p99 {last['p99']:.0f} ms")
    print(f"server alive at the end: {alive}; crash signs in its log: {crashes or 'none'}; stop: status {code}, "
          f"drained {server.last_stop.get('drained')}, {server.last_stop.get('exit_seconds')} s after SIGTERM, "
          f"/dev/shm segments removed {len(server.last_stop.get('removed_shm', []))}")
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
    ok = report["good_failed"] == 0 and report["good_wrong"] == 0 and report["bad_accepted"] == 0 and alive
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
