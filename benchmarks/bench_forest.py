"""The forest on Triton's FIL backend against the forest as a Python model, on the same
batches, in one run.

One tritonserver serves the artifact set's checkpoint.tl three ways, side by side:

- `fil, GTIL`: the FIL backend on KIND_CPU as the `cpu` profile configures it (non-batching,
  `configs.fil_io`) but with `use_experimental_optimizations "false"`: FIL's CPU default
  (Treelite's GTIL);
- `fil, experimental (default)`: the `cpu` profile's config as it is, with
  `use_experimental_optimizations "true"` (FIL's own CPU inference);
- `python`: the `portable` profile's Python model (Treelite's GTIL in the python backend).

Each gets the same batches of real features (1, 8 and 64 rows of CommonLit excerpts'
features), one request at a time over gRPC, in rotating rounds; reported: the round trip
(median), the server's compute per execution (Triton's statistics), and the largest
difference from GTIL in process (the same function every branch computes).

    python benchmarks/bench_forest.py --artifacts .cache/demo-artifacts --rounds 5 --json forest.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from readability_triton import contracts as C
from readability_triton.client.readability import triton_client
from readability_triton.corpus import default_texts
from readability_triton.features.runner import FeatureRunner
from readability_triton.forest.runner import GTILRunner
from readability_triton.repository import configs
from readability_triton.repository.assemble import backends_root
from readability_triton.repository.options import AssemblyOptions
from readability_triton.repository.profiles import PORTABLE_BACKENDS, VERSION
from readability_triton.server.installation import native_backends
from readability_triton.server.tritonserver import TritonServer

VARIANTS = {"fil, GTIL": "cpu", "fil, experimental (default)": "cpu", "python": "portable"}
_EXPERIMENTAL = 'key: "use_experimental_optimizations"\n  value {\n    string_value: "true"\n  }'


def write_model(repo: str, name: str, variant: str, artifacts: str) -> None:
    """`name` in `repo`: the forest as `variant` serves it, on the set's checkpoint."""
    config = configs.render_config(C.FOREST, AssemblyOptions(VARIANTS[variant])).replace(
        f'name: "{C.FOREST}"', f'name: "{name}"'
    )
    if variant == "fil, GTIL":  # the cpu profile sets the experimental optimizations: turn them off
        assert _EXPERIMENTAL in config, config
        config = config.replace(_EXPERIMENTAL, _EXPERIMENTAL.replace('"true"', '"false"'))
    folder = os.path.join(repo, name, VERSION)
    os.makedirs(folder)
    with open(os.path.join(repo, name, "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(config)
    shutil.copyfile(os.path.join(artifacts, "checkpoint.tl"), os.path.join(folder, "checkpoint.tl"))
    if variant == "python":
        shutil.copyfile(
            os.path.join(backends_root(), PORTABLE_BACKENDS[C.FOREST], "model.py"), os.path.join(folder, "model.py")
        )


def compute(client, model: str) -> tuple[int, int]:
    """(compute_infer ns, executions) of `model` so far, from Triton's statistics."""
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    # proto3 JSON leaves zeros out (a model that has not run yet)
    infer = stats.get("inference_stats", {}).get("compute_infer", {})
    return int(infer.get("ns", 0)), int(stats.get("execution_count", 0))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--requests", type=int, default=200, help="requests per batch size, variant and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    native = native_backends()
    if native is None or not os.path.isdir(os.path.join(native, "backends", "fil")):
        print("no FIL backend built here (make native-backends)", file=sys.stderr)
        return 2
    texts = default_texts()[0]
    features = FeatureRunner.from_folder(args.artifacts)(texts[:512]).astype(np.float32)
    gtil = GTILRunner.from_folder(args.artifacts)
    sizes = [int(b) for b in args.batches.split(",")]
    names = {variant: "forest_" + "".join(c if c.isalnum() else "_" for c in variant) for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-forest-") as tmp:
        repo = os.path.join(tmp, "repository")
        for variant, name in names.items():
            write_model(repo, name, variant, args.artifacts)
        server = TritonServer(repo, log_file=os.path.join(tmp, "server.log")).start(timeout=300)
        try:
            module, client = triton_client(server.grpc_url, "grpc")
            trips: dict = {(v, n): [] for v in VARIANTS for n in sizes}
            computes: dict = {(v, n): [] for v in VARIANTS for n in sizes}
            diffs: dict = {v: 0.0 for v in VARIANTS}
            order = list(VARIANTS)
            for round_ in range(args.rounds):
                for size in sizes:
                    for variant in order[round_ % len(order) :] + order[: round_ % len(order)]:
                        name = names[variant]
                        before = compute(client, name)
                        times = []
                        for i in range(args.requests):
                            start = (i * size) % (len(features) - size)
                            rows = features[start : start + size]
                            tensor = module.InferInput(C.INPUT_0, list(rows.shape), "FP32")
                            tensor.set_data_from_numpy(rows)
                            began = time.perf_counter()
                            out = client.infer(name, [tensor]).as_numpy(C.OUTPUT_0)
                            times.append(time.perf_counter() - began)
                            if i == 0:
                                want = gtil(rows)
                                diffs[variant] = max(
                                    diffs[variant], float(np.abs(out.reshape(-1) - want.reshape(-1)).max())
                                )
                        trips[(variant, size)].append(statistics.median(times) * 1e3)
                        after = compute(client, name)
                        computes[(variant, size)].append((after[0] - before[0]) / max(1, after[1] - before[1]) / 1e6)
            client.close()
        finally:
            server.stop()
    in_process = {}
    for size in sizes:
        rows = features[:size]
        times = []
        for _ in range(200):
            began = time.perf_counter()
            gtil(rows)
            times.append(time.perf_counter() - began)
        in_process[size] = statistics.median(times) * 1e3
    results = {
        "batches": sizes,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "max_abs_diff_vs_gtil": diffs,
        "round_trip_ms": {f"{v}|{n}": statistics.median(t) for (v, n), t in trips.items()},
        "gtil_in_process_ms": in_process,
        "compute_per_execution_ms": {f"{v}|{n}": statistics.median(c) for (v, n), c in computes.items()},
    }
    print(
        f"\nforest: {os.path.basename(os.path.normpath(args.artifacts))}, {args.rounds} rounds x {args.requests} "
        f"requests per cell, 1 gRPC client, {os.cpu_count()} CPUs; round trip median (ms)\n"
    )
    print("| batch | " + " | ".join(f"{v}: round trip (compute)" for v in VARIANTS) + " | GTIL in process |")
    print("|---" * (len(VARIANTS) + 2) + "|")
    for size in sizes:
        row = " | ".join(
            f"{results['round_trip_ms'][f'{v}|{size}']:.3f} ({results['compute_per_execution_ms'][f'{v}|{size}']:.3f})"
            for v in VARIANTS
        )
        print(f"| {size} | {row} | {in_process[size]:.3f} |")
    print("max |served - GTIL in process|: " + ", ".join(f"{v} {d:.2e}" for v, d in diffs.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
