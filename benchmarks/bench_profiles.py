"""The served repository's speed by profile, BERT runtime and thread plan, in one run.

Each variant is an assembled repository of the same artifact set, served by a test server
of its own; all servers run for the whole benchmark. In each of `--rounds` rounds, for each
data set and client count (1 and 4), the variants are measured one after the other (each
round starting one further along) by `bench` (one text per request, gRPC, closed loop),
beside the same runners in process (the served BERT file, padding and thread plan, one
thread of calls). On shared vCPUs the machine's speed drifts by tens of percent over
minutes: medians over rounds, and each variant's ratio to the first one round by round,
measured seconds apart, compare like with like (more, shorter rounds compare better).

- `portable, TorchScript, no thread plan`: what `portable` served before (model.pt in a
  Python model; every runtime sized to all cores, OpenMP spinning);
- `portable, TorchScript`: the same with the thread plan;
- `portable, ONNX` (the default): model.onnx with ONNX Runtime in a Python model, rows
  by bucket (8 tokens apart), thread plan;
- `cpu, onnxruntime_onnx` / `cpu, pytorch_libtorch`: bert on Triton's own backends and the
  forest on FIL (built by `make native-backends`), the Python steps as in `portable`;
- `..., padded`: the same assembled with `--buckets <max_length>`: every text padded to the
  sequence length, as before buckets (the others cut each request's ids to its bucket);
- `cpu, onnxruntime_onnx, not ragged`: assembled with `--no-ragged`: Triton's batcher joins
  only requests of one bucket, and the default buckets are then the coarse set (16 apart to
  128, then 256); the default `cpu` takes the ids ragged, every bucket in a batch, with
  buckets 8 apart all the way (`--buckets` gives both variants one set);
- `cpu, onnxruntime_onnx, not packed`: assembled with `--no-packed`: the ragged graph runs
  every row of a batch padded to its widest (the default runs the token-wise layers on the
  real tokens only).

`--data excerpts,short` measures each variant on the CommonLit excerpts and on their first
sentences (short texts) in every round. After the rounds, with `--buckets-seconds`, each
bucketed variant is loaded by 4 clients with the texts of one bucket at a time (each bucket
that holds at least 8 of the texts): bert's average batch per bucket, from Triton's
statistics. And SCORE and BERT_SCORE of every variant are compared with the first one's on
256 texts of each data set (32 a request): the largest difference.

    python benchmarks/bench_profiles.py --artifacts .cache/demo-artifacts --rounds 3 --duration 10 --json p.json
    python benchmarks/bench_profiles.py --artifacts .cache/demo-artifacts --variants 6,3,2 --data excerpts,short \
        --rounds 3 --duration 8 --no-in-process --buckets-seconds 6 --json buckets.json

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

import numpy as np

from readability_triton import contracts as C
from readability_triton.buckets import bucket_widths, real_lengths
from readability_triton.client.readability import ReadabilityClient
from readability_triton.corpus import default_texts, first_sentences
from readability_triton.layout import load_manifest
from readability_triton.measure import bench
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.backends import check_servable
from readability_triton.server.installation import native_backends
from readability_triton.server.tritonserver import TritonServer
from readability_triton.threads import PLAN_ENV

#: (name, profile, BERT format, thread plan: True, False or "2x" (two bert instances), ids:
#: "" (cut to the buckets), "padded" (assembled with --buckets <max_length>), "not ragged"
#: (--no-ragged: the batcher joins only requests of one bucket) or "not packed" (--no-packed))
VARIANTS: tuple[tuple[str, str, str, bool | str, str], ...] = (
    ("portable, TorchScript, no thread plan", "portable", "torchscript", False, ""),
    ("portable, TorchScript", "portable", "torchscript", True, ""),
    ("portable, ONNX (default)", "portable", "onnx", True, ""),
    ("cpu, onnxruntime_onnx", "cpu", "onnx", True, ""),
    ("cpu, pytorch_libtorch", "cpu", "torchscript", True, ""),
    ("portable, ONNX, 2 bert instances", "portable", "onnx", "2x", ""),
    ("cpu, onnxruntime_onnx, padded", "cpu", "onnx", True, "padded"),
    ("portable, ONNX, padded", "portable", "onnx", True, "padded"),
    ("cpu, onnxruntime_onnx, not ragged", "cpu", "onnx", True, "not ragged"),
    ("cpu, onnxruntime_onnx, not packed", "cpu", "onnx", True, "not packed"),
)
#: The texts of `--data`: the CommonLit excerpts (or the generated corpus), or their first sentences.
DATA = {"excerpts": lambda texts: texts, "short": lambda texts: [t for t in first_sentences(texts) if t.strip()]}
#: Texts a bucket needs to be loaded on its own (`bucket_batches`).
BUCKET_TEXTS = 8


def two_bert_instances(repo: str) -> None:
    """bert as two instances of one thread each: requests in parallel instead of one
    request over both cores."""

    def two(config) -> None:
        config.instance_group[0].count = 2

    configs.edit_config(os.path.join(repo, C.BERT, "config.pbtxt"), two)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def bucket_batches(server, pipeline, texts: list[str], seconds: float) -> list[dict]:
    """Per bucket that holds at least BUCKET_TEXTS of `texts`: 4 clients sending only those
    texts for `seconds`, and bert's average batch and compute per execution then."""
    buckets = repository.repository_buckets(server.repository)
    _, mask = pipeline.tokenizer([t.encode("utf-8") for t in texts])
    widths = bucket_widths(real_lengths(mask), buckets)
    out = []
    for width in sorted(set(widths.tolist())):
        chosen = [t for t, w in zip(texts, widths) if w == width]
        if len(chosen) < BUCKET_TEXTS:
            continue
        (row,) = bench.run(server.grpc_url, "grpc", chosen, (4,), (1,), seconds, None, warmup=1.0)
        bert = row.models.get(C.BERT, {})
        out.append(
            {
                "bucket": width,
                "texts": len(chosen),
                "texts_per_s": row.texts_per_s,
                "bert_average_batch": bert.get("average_batch"),
                "bert_ms_per_execution": bench.compute_ms(bert, "execution") if bert else None,
                "errors": row.errors,
            }
        )
    return out


def score_agreement(servers, texts: list[str], outputs=(C.SCORE, C.BERT_SCORE)) -> dict[str, dict[str, float]]:
    """{variant: {output: largest |difference| from the first variant's}} over `texts`, 32 a request."""
    answers = {}
    for name, server in servers:
        client = ReadabilityClient(server.grpc_url, "grpc")
        try:
            parts = [client.infer_batch(texts[i : i + 32], outputs=list(outputs))[0] for i in range(0, len(texts), 32)]
        finally:
            client.close()
        answers[name] = {o: np.concatenate([np.asarray(p[o]).reshape(-1) for p in parts]) for o in outputs}
    first = servers[0][0]
    return {
        name: {o: float(np.abs(answers[name][o] - answers[first][o]).max()) for o in outputs} for name, _ in servers
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all variants (medians are reported)")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--variants", default="", help="comma-separated indexes of VARIANTS (default all)")
    parser.add_argument("--data", default="excerpts", help=f"comma-separated, of {', '.join(DATA)}")
    parser.add_argument("--no-in-process", action="store_true", help="leave out the in-process rate of each row")
    parser.add_argument(
        "--buckets", default=None, help="the bucketed variants' buckets (assemble --buckets; default its default)"
    )
    parser.add_argument(
        "--buckets-seconds", type=float, default=0.0, help="after the rounds: bert's batch per bucket, 4 clients"
    )
    parser.add_argument("--json")
    parser.add_argument("--logs", default=None, help="keep the servers' logs in this folder")
    args = parser.parse_args(argv)
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    corpus = default_texts()[0]
    data = {name: DATA[name](corpus) for name in args.data.split(",")}
    chosen = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else list(VARIANTS)
    samples: dict = {}  # (variant, data, clients) -> one dict per round
    order: list[str] = []
    extra: dict = {"buckets": {}, "agreement": {}}
    with tempfile.TemporaryDirectory(prefix="bench-profiles-") as tmp, contextlib.ExitStack() as stack:
        live = []  # every variant's server runs for the whole benchmark; the rounds go over them in turn
        for name, profile, fmt, plan, ids in chosen:
            if profile == "cpu" and native_backends() is None:
                print(f"{name}: skipped (no native backends: make native-backends)", file=sys.stderr)
                continue
            repo = os.path.join(tmp, "".join(c if c.isalnum() else "-" for c in name).strip("-"))
            # padded: --buckets <max_length>, every text padded to it
            buckets = (load_manifest(args.artifacts).max_length,) if ids == "padded" else args.buckets
            ragged = False if ids == "not ragged" else None
            packed = False if ids == "not packed" else None
            repository.assemble(
                args.artifacts,
                repo,
                AssemblyOptions(profile, bert_format=fmt, buckets=buckets, ragged=ragged, packed=packed),
            )
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
            # the variants one after the other for each data set and client count: the rows a
            # ratio compares are measured seconds apart (a shared vCPU's speed drifts over minutes)
            for label, texts in data.items():
                for clients in concurrency:
                    for name, server, pipeline in live[shift:] + live[:shift]:
                        print(
                            f"round {round_ + 1}/{args.rounds}: {label}, {clients} client(s), {name}",
                            file=sys.stderr,
                            flush=True,
                        )
                        in_process = None if args.no_in_process else pipeline
                        (row,) = bench.run(
                            server.grpc_url, "grpc", texts, (clients,), (1,), args.duration, in_process, args.warmup
                        )
                        bert = row.models.get(C.BERT, {})
                        samples.setdefault((name, label, row.concurrency), []).append(
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
        if args.buckets_seconds > 0:
            for name, server, pipeline in live:
                if len(repository.repository_buckets(server.repository)) > 1:
                    print(f"bert's batch per bucket: {name}", file=sys.stderr, flush=True)
                    texts = [t for label in data for t in data[label]]
                    extra["buckets"][name] = bucket_batches(server, pipeline, texts, args.buckets_seconds)
        for label, texts in data.items():
            extra["agreement"][label] = score_agreement([(n, s) for n, s, _ in live], texts[:256])
    results = summarize(samples, order, list(data), concurrency)
    report(results, extra, args, order[0] if order else None)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {"cpus": os.cpu_count(), "duration": args.duration, "rounds": args.rounds, "rows": results, **extra},
                handle,
                indent=2,
            )
    return 0


def summarize(samples: dict, order: list[str], labels: list[str], concurrency) -> list[dict]:
    """One row per variant, data set and client count: the medians over rounds, and the
    variant's texts/s over the first variant's, round by round (their median and range)."""
    results = []
    first = order[0] if order else None
    for name in order:
        for label in labels:
            for clients in concurrency:
                rounds = samples.get((name, label, clients), [])
                result = {"variant": name, "data": label, "clients": clients, "rounds": rounds}
                for key in (
                    "texts_per_s",
                    "p50_ms",
                    "in_process",
                    "served_vs_in_process",
                    "bert_infer_ms_per_request",
                    "bert_average_batch",
                ):
                    result[key] = median(r[key] for r in rounds)
                result["errors"] = sum(r["errors"] for r in rounds)
                # against the first variant, round by round (both measured within minutes of each other)
                base = samples.get((first, label, clients), [])
                ratios = [r["texts_per_s"] / b["texts_per_s"] for r, b in zip(rounds, base) if b["texts_per_s"]]
                result["vs_first"] = median(ratios)
                result["vs_first_range"] = [min(ratios), max(ratios)] if ratios else None
                results.append(result)
    return results


def report(results: list[dict], extra: dict, args, first: str | None) -> None:
    print(
        f"\nmedians of {args.rounds} rounds, {args.duration:g} s per row; 'vs first': texts/s over the first "
        f"variant's in the same round ({first})"
    )
    print(
        f"{'variant':<40} {'data':<9} {'clients':>7} {'texts/s':>8} {'p50 ms':>7} {'in proc':>8} {'ratio':>6} "
        f"{'vs first':>8} {'(range)':>11} {'bert infer ms/req':>17} {'batch':>6} {'errors':>6}"
    )
    for r in results:
        infer = r["bert_infer_ms_per_request"]
        spread = "({:.2f}-{:.2f})".format(*r["vs_first_range"]) if r.get("vs_first_range") else ""
        print(
            f"{r['variant']:<40} {r['data']:<9} {r['clients']:>7} {r['texts_per_s'] or 0:>8.1f} "
            f"{r['p50_ms'] or 0:>7.1f} {r['in_process'] or 0:>8.1f} {r['served_vs_in_process'] or 0:>6.2f} "
            f"{r['vs_first'] or 0:>8.2f} {spread:>11} {infer if infer is not None else float('nan'):>17.1f} "
            f"{r['bert_average_batch'] or 0:>6.2f} {r['errors']:>6}"
        )
    for name, rows in extra["buckets"].items():
        print(f"\nbert's average batch per bucket, 4 clients, {name}:")
        for row in rows:
            print(
                f"  bucket {row['bucket']:>4}: {row['texts']:>5} texts, {row['texts_per_s']:6.1f} texts/s, batch "
                f"{row['bert_average_batch'] or 0:.2f}, bert {row['bert_ms_per_execution'] or 0:.1f} ms an execution"
            )
    for label, agreement in extra["agreement"].items():
        print(f"\n{label}: largest |difference| from {first}, 256 texts:")
        for name, diffs in agreement.items():
            print(f"  {name:<40} " + ", ".join(f"{o} {d:.2e}" for o, d in diffs.items()))


if __name__ == "__main__":
    sys.exit(main())
