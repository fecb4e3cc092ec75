"""Where serve's CPU goes per request: py-spy on serve's process while clients load it
through the front door.

One `serve` of a repository (the `portable` tiny set by default, whose models are almost
free, so that what is sampled is the plumbing), a closed loop of `--clients` clients, one
text per request, over gRPC and then HTTP; py-spy samples serve's process (the door's loop,
its gRPC threads, the supervisor) for the loop's duration without stopping it. Per protocol:
texts/s, serve's CPU ms per request (as `bench_door.py` counts it), and the share of py-spy's
samples by function: where the function itself was running ("self") and where it was on the
stack ("inclusive"). py-spy leaves out idle threads; a loop waiting in `select` between
events still shows. The raw profiles (py-spy's collapsed stacks) are kept in `--out`.

Needs py-spy (`pip install py-spy` in a scratch environment; `--py-spy PATH`) and the right
to trace the process (root, or ptrace allowed).

    python benchmarks/profile_door.py --artifacts .cache/test-artifacts/tiny --seconds 18 --out /tmp/door-profile
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench_door import measure

from readability_triton.corpus import default_texts
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions


def summarize(path: str, top: int = 20) -> dict:
    """Shares of py-spy's collapsed stacks in `path`: by thread, by function running
    (self) and by function on the stack (inclusive)."""
    own: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    total = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = stack.split(";")
            threads[frames[0]] += n
            own[frames[-1]] += n
            for frame in set(frames[1:]):
                inclusive[frame] += n

    def shares(counter):
        return [(name, n / total) for name, n in counter.most_common(top)] if total else []

    return {"samples": total, "threads": shares(threads), "self": shares(own), "inclusive": shares(inclusive)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", default=".cache/test-artifacts/tiny")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=18.0, help="seconds of load (and of sampling) per protocol")
    parser.add_argument("--rate", type=int, default=200, help="py-spy's samples per second")
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--out", default="door-profile", help="folder for the raw profiles")
    args = parser.parse_args(argv)
    if shutil.which(args.py_spy) is None and not os.access(args.py_spy, os.X_OK):
        print(f"no py-spy at {args.py_spy}: pip install py-spy (a scratch venv), then --py-spy PATH", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    texts = default_texts(400)[0]
    with tempfile.TemporaryDirectory(prefix="profile-door-") as tmp:
        repo = os.path.join(tmp, "repository")
        repository.assemble(args.artifacts, repo, AssemblyOptions("portable"))
        with launch_serve(repo, tmp, stop_timeout=60) as serve:
            process, ports = serve.running, serve.ports
            for protocol in args.protocols.split(","):
                raw = os.path.join(args.out, f"{protocol}.txt")
                spy = subprocess.Popen(
                    [args.py_spy, "record", "-p", str(process.pid), "-r", str(args.rate)]
                    + ["-d", str(int(args.seconds + 2)), "-f", "raw", "-o", raw, "--nonblocking"],
                    stdout=subprocess.DEVNULL,
                    stderr=open(os.path.join(args.out, f"{protocol}.py-spy.log"), "wb"),
                )
                time.sleep(1.0)  # py-spy attaches
                row = measure(
                    f"127.0.0.1:{ports[protocol]}", protocol, texts, args.clients, args.seconds, {"serve": process.pid}
                )
                if spy.wait(timeout=120) != 0 or not os.path.isfile(raw):
                    print(f"py-spy failed: see {args.out}/{protocol}.py-spy.log", file=sys.stderr)
                    return 1
                report = summarize(raw)
                rate, p50, cpu = row["texts_per_s"], row["p50_ms"], row["serve_cpu_ms"]
                print(
                    f"\n{protocol}, {args.clients} clients: {rate:.0f} texts/s, p50 {p50:.1f} ms, serve {cpu:.2f} ms "
                    f"CPU a request; {report['samples']} samples ({raw})"
                )
                for kind in ("self", "inclusive"):
                    print(f"  {kind}:")
                    for name, share in report[kind]:
                        print(f"    {share:6.1%}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
