"""The served repository's speed by profile, BERT runtime and thread plan, in one run.

Each variant is an assembled repository of the same artifact set, served by a test server
of its own; all servers run for the whole benchmark, and `--rounds` rounds go over the
variants in turn (each round starting one further along), each measured by `bench` (one
text per request, gRPC, closed loop) at 1 and 4 clients, beside the same runners in process
(the served BERT file, padding and thread plan, one thread of calls). On shared vCPUs the
machine's speed drifts by tens of percent over minutes: medians over rounds, and each
variant's ratio to the first one round by round, compare like with like.

- `portable, TorchScript, no thread plan`: what `portable` served before (model.pt in a
  Python model; every runtime sized to all cores, OpenMP spinning);
- `portable, TorchScript`: the same with the thread plan;
- `portable, ONNX` (the default): model.onnx with ONNX Runtime in a Python model, rows
  in bands of 8 tokens without their padding, thread plan;
- `cpu, onnxruntime_onnx` / `cpu, pytorch_libtorch`: bert on Triton's own backends and the
  forest on FIL (built by `make native-backends`), the Python steps as in `portable`.

    python benchmarks/bench_profiles.py --artifacts .cache/demo-artifacts --rounds 3 --duration 10 --json p.json

Prints texts/s, p50 and the served/in-process ratio per row, and bert's compute (infer) per
request and per execution from Triton's statistics.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile

from readability_triton import contracts as C
from readability_triton.artifacts.corpus import default_texts
from readability_triton.client import bench
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.server.backends import check_servable
from readability_triton.server.installation import native_backends
from readability_triton.server.tritonserver import TritonServer
from readability_triton.threads import PLAN_ENV

VARIANTS = (
    ("portable, TorchScript, no thread plan", "portable", "torchscript", False),
    ("portable, TorchScript", "portable", "torchscript", True),
    ("portable, ONNX (default)", "portable", "onnx", True),
    ("cpu, onnxruntime_onnx", "cpu", "onnx", True),
    ("cpu, pytorch_libtorch", "cpu", "torchscript", True),
    ("portable, ONNX, 2 bert instances", "portable", "onnx", "2x"),
)


def two_bert_instances(repo: str) -> None:
    """bert as two instances of one thread each: requests in parallel instead of one
    request over both cores."""

    def two(config) -> None:
        config.instance_group[0].count = 2

    configs.edit_config(os.path.join(repo, C.BERT, "config.pbtxt"), two)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all variants (medians are reported)")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--variants", default="", help="comma-separated indexes of VARIANTS (default all)")
    parser.add_argument("--json")
    parser.add_argument("--logs", default=None, help="keep the servers' logs in this folder")
    args = parser.parse_args(argv)
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    texts = default_texts()[0]
    chosen = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else list(VARIANTS)
    samples: dict = {}  # (variant, clients) -> one dict per round
    order: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-profiles-") as tmp, contextlib.ExitStack() as stack:
        live = []  # every variant's server runs for the whole benchmark; the rounds go over them in turn
        for name, profile, fmt, plan in chosen:
            if profile == "cpu" and native_backends() is None:
                print(f"{name}: skipped (no native backends: make native-backends)", file=sys.stderr)
                continue
            repo = os.path.join(tmp, "".join(c if c.isalnum() else "-" for c in name).strip("-"))
            repository.assemble(args.artifacts, repo, profile, bert_format=fmt)
            if plan == "2x":
                two_bert_instances(repo)
            # without the plan: every runtime its own default (all cores, OpenMP's own wait
            # policy), in the server (its environment at start) and in process, as before the plan
            os.environ[PLAN_ENV] = "on" if plan else "off"
            pipeline = repository.repository_pipeline(repo)
            logs = args.logs or tmp
            os.makedirs(logs, exist_ok=True)
            server = TritonServer(repo, log_file=os.path.join(logs, f"{os.path.basename(repo)}.log"))
            check_servable(server, repo)
            print(
                f"{name}: served bert {repository.served_bert(repo)}; in process {pipeline.bert.describe()}",
                file=sys.stderr,
                flush=True,
            )
            server.start(timeout=300)
            stack.callback(server.stop)
            live.append((name, server, pipeline))
            order.append(name)
        os.environ[PLAN_ENV] = "on"
        for round_ in range(args.rounds):
            shift = round_ % len(live)  # each variant goes first in some round: no place in the order is favoured
            for name, server, pipeline in live[shift:] + live[:shift]:
                print(f"round {round_ + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                for row in bench.run(
                    server.grpc_url, "grpc", texts, concurrency, (1,), args.duration, pipeline, args.warmup
                ):
                    bert = row.models.get(C.BERT, {})
                    samples.setdefault((name, row.concurrency), []).append(
                        {
                            "texts_per_s": row.texts_per_s,
                            "p50_ms": row.latency_ms["p50"],
                            "in_process": row.in_process_texts_per_s,
                            "served_vs_in_process": row.served_vs_in_process,
                            "bert_infer_ms_per_request": bert.get("compute_infer_ms_per_request"),
                            "bert_average_batch": bert.get("average_batch"),
                            "errors": row.errors,
                        }
                    )
    results = []
    first = order[0] if order else None
    for name in order:
        for clients in concurrency:
            rounds = samples.get((name, clients), [])
            result = {"variant": name, "clients": clients, "rounds": rounds}
            for key in (
                "texts_per_s",
                "p50_ms",
                "in_process",
                "served_vs_in_process",
                "bert_infer_ms_per_request",
                "bert_average_batch",
            ):
                result[key] = median(r[key] for r in rounds)
            # against the first variant, round by round (both measured within minutes of each other)
            base = samples.get((first, clients), [])
            result[f"vs_{first}"] = median(
                r["texts_per_s"] / b["texts_per_s"] for r, b in zip(rounds, base) if b["texts_per_s"]
            )
            results.append(result)
    print(
        f"\nmedians of {args.rounds} rounds, {args.duration:g} s per row; 'vs first': texts/s over the first "
        f"variant's in the same round ({first})"
    )
    print(
        f"{'variant':<40} {'clients':>7} {'texts/s':>8} {'p50 ms':>7} {'in proc':>8} {'ratio':>6} "
        f"{'vs first':>8} {'bert infer ms/req':>17} {'batch':>6}"
    )
    for r in results:
        infer = r["bert_infer_ms_per_request"]
        print(
            f"{r['variant']:<40} {r['clients']:>7} {r['texts_per_s']:>8.1f} {r['p50_ms']:>7.1f} "
            f"{r['in_process'] or 0:>8.1f} {r['served_vs_in_process'] or 0:>6.2f} {r[f'vs_{first}'] or 0:>8.2f} "
            f"{infer if infer is not None else float('nan'):>17.1f} {r['bert_average_batch'] or 0:>6.1f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {"cpus": os.cpu_count(), "duration": args.duration, "rounds": args.rounds, "rows": results},
                handle,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
