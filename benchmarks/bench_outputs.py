"""What the new outputs cost: this commit's ensemble against an earlier commit's, in one run.

The "before" repository is assembled and served by the code of an earlier commit (`--before`,
by default the last commit whose ensemble answered only SCORE, BERT_SCORE and FOREST_SCORE),
exported with `git archive` and put first on the PYTHONPATH of its assembly and of its
server's Python stubs; the "now" repository by this checkout. Both are assembled from the same
artifact set (portable profile) and both servers run through the whole benchmark; rounds
rotate which is measured first. Each client sends one text per request over gRPC in a closed
loop and asks for every output its ensemble has: before, the three scores; now, those, the
interval and the seven formulas.

    python benchmarks/bench_outputs.py --artifacts .cache/demo-artifacts --rounds 3 --duration 20

Reported: median texts/s and p50 per side and client count, and now/before (the issue's bar:
at least 0.95).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from readability_triton import contracts as C
from readability_triton.client.readability import ThreadClients, text_input
from readability_triton.corpus import default_texts
from readability_triton.measure.load import Outcome, closed_loop, percentiles
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.tritonserver import TritonServer

#: The last commit before SCORE_LOW, SCORE_HIGH and the formulas.
BEFORE = "f60d28b"
BEFORE_OUTPUTS = (C.SCORE, C.BERT_SCORE, C.FOREST_SCORE)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(rev: str, where: str) -> str:
    """The source tree of commit `rev` in `where` (git archive; the checkout is untouched)."""
    os.makedirs(where)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    return where


def assemble_with(source: str, artifacts: str, out: str) -> None:
    env = {**os.environ, "PYTHONPATH": source}
    cmd = [sys.executable, "-m", "readability_triton.cli", "assemble", "--profile", "portable"]
    subprocess.run([*cmd, "--artifacts", artifacts, "--out", out], check=True, env=env, capture_output=True)


def served_row(url: str, texts: list[str], outputs, clients: int, seconds: float) -> dict:
    pool = ThreadClients(url, "grpc")

    def work(client: int, i: int):
        module, triton = pool.get()
        text = texts[(client * 7919 + i) % len(texts)]
        started = time.perf_counter()
        result = triton.infer(
            C.ENSEMBLE, [text_input(module, [text])], outputs=[module.InferRequestedOutput(n) for n in outputs]
        )
        assert all(result.as_numpy(n) is not None for n in outputs)
        return Outcome(started, time.perf_counter() - started, "good", True)

    try:
        closed_loop(work, clients, min(3.0, seconds / 4))  # warm-up
        outcomes = closed_loop(work, clients, seconds)
    finally:
        pool.close()
    return {"texts_per_s": len(outcomes) / seconds, "p50_ms": percentiles([o.latency for o in outcomes])["p50"]}


def start(repo: str, log: str, pythonpath: str | None) -> TritonServer:
    """A server whose Python stubs import the package from `pythonpath` (else this checkout's)."""
    saved = os.environ.get("PYTHONPATH")
    if pythonpath:
        os.environ["PYTHONPATH"] = pythonpath
    try:
        server = TritonServer(repo, log_file=log)
        server.start(timeout=600)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return server


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True, help="the artifact set both sides serve")
    parser.add_argument("--before", default=BEFORE, help=f"the earlier commit (default {BEFORE})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    texts, which = default_texts(400)
    print(f"texts: {which}", file=sys.stderr)
    clients = [int(c) for c in args.concurrency.split(",")]
    samples: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-outputs-") as tmp:
        old = export(args.before, os.path.join(tmp, "before-src"))
        repos = {"before": os.path.join(tmp, "before"), "now": os.path.join(tmp, "now")}
        assemble_with(old, args.artifacts, repos["before"])
        repository.assemble(args.artifacts, repos["now"], AssemblyOptions("portable"))
        servers = {
            "before": start(repos["before"], os.path.join(tmp, "before.log"), old),
            "now": start(repos["now"], os.path.join(tmp, "now.log"), None),
        }
        outputs = {"before": BEFORE_OUTPUTS, "now": C.OUTPUTS}
        try:
            for round_ in range(args.rounds):
                for c in clients:
                    order = ["before", "now"] if round_ % 2 == 0 else ["now", "before"]
                    for side in order:
                        row = served_row(servers[side].grpc_url, texts, outputs[side], c, args.duration)
                        samples.setdefault((side, c), []).append(row)
                        print(f"round {round_ + 1}, {c} client(s), {side}: {row}", file=sys.stderr, flush=True)
        finally:
            for server in servers.values():
                server.stop()
    report: dict = {"before": args.before, "rounds": args.rounds, "duration_s": args.duration, "rows": []}
    print(
        f"\n{args.rounds} rounds x {args.duration:g} s, 1 text per request over gRPC, {os.cpu_count()} CPUs; "
        f"before = {args.before} ({len(BEFORE_OUTPUTS)} outputs), now = this checkout ({len(C.OUTPUTS)} outputs)\n"
    )
    print("| clients | before texts/s (p50 ms) | now texts/s (p50 ms) | now / before |")
    print("|---|---|---|---|")
    for c in clients:
        med = {s: statistics.median(r["texts_per_s"] for r in samples[(s, c)]) for s in ("before", "now")}
        p50 = {s: statistics.median(r["p50_ms"] for r in samples[(s, c)]) for s in ("before", "now")}
        ratio = med["now"] / med["before"]
        report["rows"].append({"clients": c, "texts_per_s": med, "p50_ms": p50, "now_vs_before": ratio})
        print(
            f"| {c} | {med['before']:.2f} ({p50['before']:.1f}) | {med['now']:.2f} ({p50['now']:.1f}) | {ratio:.3f} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
