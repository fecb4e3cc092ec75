"""End-to-end throughput and latency of the `readability` ensemble on a real tritonserver.

    .venv/bin/python benchmarks/ensemble.py [--artifacts .cache/demo-artifacts] [--profile portable]
                                            [--texts-per-request 1,16] [--concurrency 1,4,16]
                                            [--seconds 10] [--protocol grpc]

Assembles the artifact set (default: the `make demo` artifacts) into a repository, starts
the tritonserver of the nvidia-pytriton wheel on 127.0.0.1 (the `portable` profile unless
you run it inside a Triton image with the libtorch and FIL backends), then for every
(texts per request, concurrency) pair keeps that many requests in flight for `--seconds`
and prints texts/s and the median and 99th-percentile request latency. Texts are the
CommonLit excerpts (or a generated corpus when the shared data is absent). The server is
stopped by PID at the end.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.triton import repository
from readability_triton.triton.client import ReadabilityClient
from readability_triton.triton.server import TritonServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def texts_for_benchmark() -> tuple[list[str], str]:
    path = os.path.normpath(COMMONLIT_CSV)
    if os.path.isfile(path):
        return read_table(path).texts, path
    from readability_triton.artifacts.corpus import generate_corpus

    return generate_corpus(600)[0], "generated corpus"


def run_load(url: str, protocol: str, texts: list[str], per_request: int, concurrency: int, seconds: float):
    """`concurrency` clients, each sending requests of `per_request` texts back to back."""
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        with ReadabilityClient(url, protocol, batch_size=per_request) as client:
            at = offset * 997
            while time.perf_counter() < stop:
                chunk = [texts[(at + i) % len(texts)] for i in range(per_request)]
                at += per_request
                _, elapsed = client.infer_batch(chunk)
                with lock:
                    latencies.append(elapsed)
                    done[0] += per_request

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return done[0] / wall, statistics.median(latencies), p99, len(latencies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", default=os.path.join(ROOT, ".cache", "demo-artifacts"))
    parser.add_argument("--profile", default="portable", choices=repository.PROFILES)
    parser.add_argument("--texts-per-request", default="1,16")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--protocol", default="grpc", choices=("http", "grpc"))
    args = parser.parse_args()
    if not os.path.isdir(args.artifacts):
        print(f"no artifact set at {args.artifacts}: run `make demo` (or readability-triton build-demo) first",
              file=sys.stderr)
        return 2
    texts, source = texts_for_benchmark()
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "repository")
        manifest = repository.assemble(args.artifacts, repo, args.profile)
        with TritonServer(repo, log_file=os.path.join(tmp, "server.log")) as server:
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
            run_load(url, args.protocol, texts, 1, 1, 1.0)  # warm-up
            bert = manifest.get("info", {}).get("bert", {}).get("encoder", "?")
            print(f"ensemble benchmark: profile {args.profile}, {args.protocol}, BERT {bert}, max_length "
                  f"{manifest['max_length']}, texts from {source}, {os.cpu_count()} CPUs, {args.seconds:.0f} s "
                  "per row")
            print(f"{'texts/request':>13} | {'concurrency':>11} | {'texts/s':>8} | {'p50 ms':>8} | "
                  f"{'p99 ms':>8} | requests")
            print("-" * 72)
            for per_request in map(int, args.texts_per_request.split(",")):
                for concurrency in map(int, args.concurrency.split(",")):
                    rate, p50, p99, n = run_load(url, args.protocol, texts, per_request, concurrency, args.seconds)
                    print(f"{per_request:>13} | {concurrency:>11} | {rate:>8.1f} | {p50:>8.1f} | {p99:>8.1f} | {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
