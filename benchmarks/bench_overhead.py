"""The pipeline's own cost, against Triton's floor, in one run.

Three things are measured side by side, in rotating rounds, one text per request over gRPC
(closed loops of 1 and 4 clients):

- `chain`: six trivial Python models in an ensemble chain (each returns its BYTES input),
  configured as the project's steps are (dynamic batching, no queue delay, one CPU
  instance): what six python-backend hops cost on this server, and nothing else;
- `ensemble`: the project's repository (the `portable` tiny set by default, whose BERT is
  almost free, so that what remains is the pipeline's plumbing);
- `in process`: the same runners on the same texts in this process (`pipeline`), one
  thread of calls, one text per call;
- with `--baseline REPO`, a fourth: another assembled repository (for example one built by
  an earlier commit, with the earlier wiring) served by the same code, side by side.

The pipeline's own cost per text is (1/served rate − 1/in-process rate) at each client
count; the chain's is 1/its rate (it does nothing else). Reported: texts/s, p50, the
served/in-process ratio, both costs and their ratio.

    python benchmarks/bench_overhead.py --artifacts .cache/test-artifacts/tiny --rounds 3 --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from readability_triton import contracts as C
from readability_triton.artifacts.corpus import default_texts
from readability_triton.client.load import closed_loop, percentiles
from readability_triton.client.readability import ThreadClients, text_input
from readability_triton.repository import assemble as repository
from readability_triton.server.tritonserver import TritonServer

STEPS = 6
_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
_STEP_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 64
input {{ name: "IN" data_type: TYPE_STRING dims: 1 }}
output {{ name: "OUT" data_type: TYPE_STRING dims: 1 }}
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
instance_group {{ count: 1 kind: KIND_CPU }}
"""


def write_chain(root: str) -> str:
    """The trivial chain: `chain` (an ensemble) over step0 ... step5."""
    steps = []
    for i in range(STEPS):
        name = f"step{i}"
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(_STEP_CONFIG.format(name=name))
        with open(os.path.join(root, name, "1", "model.py"), "w", encoding="utf-8") as handle:
            handle.write(_IDENTITY)
        source = C.TEXT if i == 0 else f"T{i}"
        target = "OUT" if i == STEPS - 1 else f"T{i + 1}"
        steps.append(
            f'step {{ model_name: "{name}" model_version: -1 input_map {{ key: "IN" value: "{source}" }} '
            f'output_map {{ key: "OUT" value: "{target}" }} }}'
        )
    os.makedirs(os.path.join(root, "chain", "1"))
    with open(os.path.join(root, "chain", "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(
            'name: "chain"\nplatform: "ensemble"\nmax_batch_size: 64\n'
            f'input {{ name: "{C.TEXT}" data_type: TYPE_STRING dims: 1 }}\n'
            'output { name: "OUT" data_type: TYPE_STRING dims: 1 }\n'
            "ensemble_scheduling {\n  " + "\n  ".join(steps) + "\n}\n"
        )
    return root


def served_row(url: str, model: str, texts: list[str], clients: int, seconds: float) -> dict:
    pool = ThreadClients(url, "grpc")

    def work(client: int, i: int):
        from readability_triton.client.load import Outcome

        module, triton = pool.get()
        text = texts[(client * 7919 + i) % len(texts)]
        started = time.perf_counter()
        triton.infer(model, [text_input(module, [text])])
        return Outcome(started, time.perf_counter() - started, "good", True)

    try:
        closed_loop(work, clients, min(2.0, seconds / 4))  # warm-up
        outcomes = closed_loop(work, clients, seconds)
    finally:
        pool.close()
    return {"texts_per_s": len(outcomes) / seconds, "p50_ms": percentiles([o.latency for o in outcomes])["p50"]}


def in_process_rate(pipeline, texts: list[str], seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        pipeline([texts[done % len(texts)]], validate=True)
        done += 1
    return done / (time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True, help="the set to serve (portable)")
    parser.add_argument("--repository", default=None, help="serve this assembled repository instead")
    parser.add_argument(
        "--baseline", default=None, help="also serve this assembled repository, side by side (e.g. an earlier wiring)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    texts = default_texts()[0][:400]
    clients = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        repo = args.repository or os.path.join(tmp, "repository")
        if not args.repository:
            repository.assemble(args.artifacts, repo, "portable")
        pipeline = repository.repository_pipeline(repo)
        chain = TritonServer(write_chain(os.path.join(tmp, "chain")), log_file=os.path.join(tmp, "chain.log"))
        served = TritonServer(repo, log_file=os.path.join(tmp, "ensemble.log"))
        baseline = TritonServer(args.baseline, log_file=os.path.join(tmp, "baseline.log")) if args.baseline else None
        servers = [s for s in (chain, served, baseline) if s is not None]
        samples: dict = {}
        try:
            for each in servers:
                each.start(timeout=300)
            for round_ in range(args.rounds):
                for c in clients:
                    order = [("chain", chain, "chain"), ("ensemble", served, C.ENSEMBLE), ("in process", None, None)]
                    if baseline is not None:
                        order.append(("baseline", baseline, C.ENSEMBLE))
                    order = order[round_ % len(order) :] + order[: round_ % len(order)]
                    for name, server, model in order:
                        if server is None or model is None:
                            row = {"texts_per_s": in_process_rate(pipeline, texts, args.duration / 2)}
                        else:
                            row = served_row(server.grpc_url, model, texts, c, args.duration)
                        samples.setdefault((name, c), []).append(row)
                        print(f"round {round_ + 1}, {c} client(s), {name}: {row}", file=sys.stderr, flush=True)
        finally:
            for each in servers:
                each.stop()
    report: dict = {"cpus": os.cpu_count(), "rounds": args.rounds, "duration_s": args.duration, "rows": []}
    print(f"\n{args.rounds} rounds x {args.duration:g} s, 1 text per request over gRPC, {os.cpu_count()} CPUs\n")
    print(
        "| clients | chain texts/s (p50 ms) | ensemble texts/s (p50 ms) | in process texts/s | served / in process "
        "| own cost ms/text | chain ms/text | own / chain |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in clients:
        med = {
            name: statistics.median(r["texts_per_s"] for r in samples[(name, c)])
            for name in ("chain", "ensemble", "in process")
        }
        p50 = {name: statistics.median(r["p50_ms"] for r in samples[(name, c)]) for name in ("chain", "ensemble")}
        own = 1e3 / med["ensemble"] - 1e3 / med["in process"]
        floor = 1e3 / med["chain"]
        row = {
            "clients": c,
            **{f"{k}_texts_per_s": v for k, v in med.items()},
            "chain_p50_ms": p50["chain"],
            "ensemble_p50_ms": p50["ensemble"],
            "served_vs_in_process": med["ensemble"] / med["in process"],
            "own_cost_ms": own,
            "chain_cost_ms": floor,
            "own_vs_chain": own / floor,
        }
        report["rows"].append(row)
        print(
            f"| {c} | {med['chain']:.1f} ({p50['chain']:.2f}) | {med['ensemble']:.1f} ({p50['ensemble']:.2f}) | "
            f"{med['in process']:.1f} | {row['served_vs_in_process']:.2f} | {own:.2f} | {floor:.2f} | "
            f"{row['own_vs_chain']:.2f} |"
        )
    if baseline is not None:
        print(f"\nbaseline: {args.baseline}, served side by side\n")
        print("| clients | baseline texts/s (p50 ms) | ensemble texts/s (p50 ms) | ensemble / baseline (texts/s) |")
        print("|---|---|---|---|")
        for c in clients:

            def median(name, key, c=c):
                return statistics.median(r[key] for r in samples[(name, c)])

            base, new = median("baseline", "texts_per_s"), median("ensemble", "texts_per_s")
            base_p50, new_p50 = median("baseline", "p50_ms"), median("ensemble", "p50_ms")
            report.setdefault("baseline", []).append(
                {"clients": c, "baseline_texts_per_s": base, "baseline_p50_ms": base_p50, "vs_baseline": new / base}
            )
            print(f"| {c} | {base:.1f} ({base_p50:.2f}) | {new:.1f} ({new_p50:.2f}) | {new / base:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
