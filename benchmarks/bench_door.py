"""What the front door costs, measured beside the server it guards, in one run.

One `serve` of a repository (the `portable` tiny set by default, whose BERT is almost free,
so that what is measured is the plumbing): closed loops of 1, 4 and 16 clients, one text
per request, over gRPC and HTTP, each sent two ways in rotating rounds:

- `door`: to serve's published ports, through the front door;
- `direct`: to the ports of serve's own tritonserver (read from its command line), past
  the door, to the same models at the same moment of the run.

Per (protocol, clients): texts/s and p50 of each way (the medians of the rounds), the
door's texts/s over direct's (the median of the per-round ratios), the p50 the door adds,
and the CPU time per request of serve's own process (the door, and the supervisor, whose
canary runs in both ways: its share is what a direct round costs serve per request) and of
tritonserver's process (the pipeline around the stubs).

With `--baseline-code DIR`, a second serve of the same repository by the package in DIR (a
checkout of an earlier commit, `git worktree add`) is measured in the same rounds, through its
door: the way `baseline`, and a second table of this door against it.

    python benchmarks/bench_door.py --artifacts .cache/test-artifacts/tiny --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

from readability_triton import contracts as C
from readability_triton.client.readability import ThreadClients, text_input
from readability_triton.corpus import default_texts
from readability_triton.measure.launch import launch_serve
from readability_triton.measure.load import Outcome, closed_loop, percentiles
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time of process `pid` (its own, not its children's)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def server_ports(pid: int) -> dict[str, int]:
    """tritonserver's HTTP and gRPC ports, from its command line."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        args = handle.read().decode().split("\0")
    return {name: int(args[args.index(f"--{name}-port") + 1]) for name in ("http", "grpc")}


def measure(url: str, protocol: str, texts: list[str], clients: int, seconds: float, pids: dict[str, int]) -> dict:
    """A closed loop of `clients` for `seconds` (after a short warm-up): texts/s, p50, and
    each process's CPU ms per request over the loop."""
    pool = ThreadClients(url, protocol)

    def work(client: int, i: int) -> Outcome:
        module, triton = pool.get()
        text = texts[(client * 7919 + i) % len(texts)]
        started = time.perf_counter()
        triton.infer(C.ENSEMBLE, [text_input(module, [text])], outputs=[module.InferRequestedOutput(C.SCORE)])
        return Outcome(started, time.perf_counter() - started, "good", True)

    try:
        closed_loop(work, clients, min(1.0, seconds / 4))
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        outcomes = closed_loop(work, clients, seconds)
        after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    finally:
        pool.close()
    n = len(outcomes)
    return {
        "texts_per_s": n / seconds,
        "p50_ms": percentiles([o.latency for o in outcomes])["p50"],
        **{f"{name}_cpu_ms": (after[name] - before[name]) * 1e3 / max(n, 1) for name in pids},
    }


@contextlib.contextmanager
def baseline_serve(repository: str, folder: str, code: str):
    """`launch_serve` by the package in `code` (PYTHONPATH; started from a folder without a
    package, since `python -m` puts its working folder first on sys.path)."""
    here = os.getcwd()
    os.makedirs(folder, exist_ok=True)
    os.chdir(folder)
    try:
        launched = launch_serve(repository, folder, env={"PYTHONPATH": os.path.abspath(code)}, stop_timeout=120)
        serve = launched.__enter__()
    finally:
        os.chdir(here)
    try:
        yield serve
    finally:
        launched.__exit__(None, None, None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", default=".cache/test-artifacts/tiny", help="the set to serve (portable)")
    parser.add_argument("--repository", default=None, help="serve this assembled repository instead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument(
        "--baseline-code",
        metavar="DIR",
        help="also measure a serve of the same repository by another checkout's package (DIR holds its "
        "readability_triton/): the way 'baseline', through its door",
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    texts = default_texts()[0][:400]
    clients = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocols.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-door-") as tmp:
        repo = args.repository or os.path.join(tmp, "repository")
        if not args.repository:
            repository.assemble(args.artifacts, repo, AssemblyOptions("portable"))
        with contextlib.ExitStack() as stack:
            serve = stack.enter_context(launch_serve(repo, os.path.join(tmp, "serve"), stop_timeout=120))
            ports = serve.ports
            server_pid = int(serve.status(timeout=10)["pid"])
            direct = server_ports(server_pid)
            pids = {"serve": serve.pid, "tritonserver": server_pid}
            ways = {"door": (ports, pids), "direct": (direct, pids)}
            if args.baseline_code:
                baseline = stack.enter_context(baseline_serve(repo, os.path.join(tmp, "baseline"), args.baseline_code))
                watched = {"serve": baseline.pid, "tritonserver": int(baseline.status(timeout=10)["pid"])}
                ways["baseline"] = (baseline.ports, watched)
            cells = [(p, c, way) for p in protocols for c in clients for way in ways]
            samples: dict[tuple, list[dict]] = {}
            for r in range(args.rounds):
                order = cells[r % len(cells) :] + cells[: r % len(cells)]
                for protocol, n, way in order:
                    port_of, watched = ways[way]
                    row = measure(f"127.0.0.1:{port_of[protocol]}", protocol, texts, n, args.duration, watched)
                    samples.setdefault((protocol, n, way), []).append(row)
                    print(
                        f"round {r + 1}: {protocol} {n:>2} client(s) {way:>6}: {row['texts_per_s']:7.1f} texts/s, "
                        f"p50 {row['p50_ms']:5.2f} ms, serve {row['serve_cpu_ms']:.3f} ms CPU/request",
                        file=sys.stderr,
                        flush=True,
                    )
    table = []
    for protocol in protocols:
        for n in clients:
            door, straight = samples[(protocol, n, "door")], samples[(protocol, n, "direct")]
            med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
            table.append(
                {
                    "protocol": protocol,
                    "clients": n,
                    "door_texts_per_s": med(door, "texts_per_s"),
                    "direct_texts_per_s": med(straight, "texts_per_s"),
                    "ratio": statistics.median(d["texts_per_s"] / s["texts_per_s"] for d, s in zip(door, straight)),
                    "door_p50_ms": med(door, "p50_ms"),
                    "direct_p50_ms": med(straight, "p50_ms"),
                    "serve_cpu_ms_door": med(door, "serve_cpu_ms"),
                    "serve_cpu_ms_direct": med(straight, "serve_cpu_ms"),
                    "tritonserver_cpu_ms": med(straight, "tritonserver_cpu_ms"),
                }
            )
    print(
        f"\nthe front door against direct ({args.rounds} rounds of {args.duration:g} s, one text per request, "
        f"{os.cpu_count()} CPUs; medians)\n"
    )
    print(
        "| protocol | clients | door texts/s | direct texts/s | door / direct | p50 door | p50 direct | p50 added "
        "| serve CPU ms/request (door) | serve's, direct rounds | tritonserver CPU ms/request |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in table:
        print(
            f"| {t['protocol']} | {t['clients']} | {t['door_texts_per_s']:.1f} | {t['direct_texts_per_s']:.1f} | "
            f"{t['ratio']:.2f} | {t['door_p50_ms']:.2f} | {t['direct_p50_ms']:.2f} | "
            f"{t['door_p50_ms'] - t['direct_p50_ms']:.2f} | {t['serve_cpu_ms_door']:.3f} | "
            f"{t['serve_cpu_ms_direct']:.3f} | {t['tritonserver_cpu_ms']:.3f} |"
        )
    if args.baseline_code:
        print(f"\nthis checkout's door against {args.baseline_code}'s (medians; ratios of the same rounds)\n")
        print(
            "| protocol | clients | door texts/s | baseline texts/s | door / baseline | p50 door | p50 baseline "
            "| serve CPU ms/request | baseline's |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for t in table:
            door, base = (
                samples[(t["protocol"], t["clients"], "door")],
                samples[(t["protocol"], t["clients"], "baseline")],
            )
            t["baseline_texts_per_s"] = statistics.median(r["texts_per_s"] for r in base)
            t["baseline_ratio"] = statistics.median(d["texts_per_s"] / b["texts_per_s"] for d, b in zip(door, base))
            t["baseline_p50_ms"] = statistics.median(r["p50_ms"] for r in base)
            t["serve_cpu_ms_baseline"] = statistics.median(r["serve_cpu_ms"] for r in base)
            print(
                f"| {t['protocol']} | {t['clients']} | {t['door_texts_per_s']:.1f} | {t['baseline_texts_per_s']:.1f} | "
                f"{t['baseline_ratio']:.2f} | {t['door_p50_ms']:.2f} | {t['baseline_p50_ms']:.2f} | "
                f"{t['serve_cpu_ms_door']:.3f} | {t['serve_cpu_ms_baseline']:.3f} |"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"rounds": args.rounds, "duration": args.duration, "rows": table}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
