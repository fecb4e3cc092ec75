"""What a stub's turns can cost a runner: the same runners on the same texts, one text per
call, with and without what a stub's life does to its caches.

A served pipeline runs each step in its own process, for a fraction of a millisecond, then
waits while the other steps, tritonserver and the client run; at one client each stub is
idle most of the time and the others' memory passes through the caches in between. The
in-process row of `bench` and `bench_overhead` calls the runners back to back. This
benchmark times each runner (featurize, forest, tokenizer, bert, blend) per text four ways,
in rotating rounds in one run:

- `hot`: back to back, as the in-process rows do;
- `idle`: after an idle pause before each text (`--pause-ms`, as long as a stub waits
  between its turns at one client: the rest of a request's round trip);
- `swept`: after a pass over a buffer larger than the caches (`--sweep-mib`), as the other
  processes' memory passes through them;
- `both`: the pause and the sweep.

Reported: each runner's median ms per text in each way, their sum, and the sum against `hot`.

    python benchmarks/bench_warmth.py --artifacts .cache/test-artifacts/tiny --rounds 3
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

import numpy as np

from readability_triton.corpus import default_texts
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions

WAYS = ("hot", "idle", "swept", "both")
RUNNERS = ("featurize", "forest", "tokenizer", "bert", "blend")


def time_texts(pipeline, texts, way: str, pause_s: float, sweep: np.ndarray) -> dict[str, float]:
    """Median ms per text of each runner over `texts`, one text per call, prepared `way`."""
    times: dict[str, list[float]] = {name: [] for name in RUNNERS}
    for text in texts:
        if way in ("swept", "both"):
            sweep[::64] += 1  # one write per cache line
        if way in ("idle", "both"):
            time.sleep(pause_s)
        t0 = time.perf_counter()
        features, words, *_ = pipeline.features([text])
        t1 = time.perf_counter()
        forest = pipeline.forest(features)
        t2 = time.perf_counter()
        ids, mask = pipeline.tokenizer([text])
        t3 = time.perf_counter()
        bert = pipeline.bert(ids, mask)
        t4 = time.perf_counter()
        pipeline.blender(bert, forest, words)
        t5 = time.perf_counter()
        for name, seconds in zip(RUNNERS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            times[name].append(seconds * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(pipeline, texts, rounds: int, pause_ms: float, sweep_mib: int, progress=None) -> dict[str, dict]:
    """{way: {runner: median over rounds of the per-round median ms per text, "total": ...}},
    the ways rotating their order from round to round."""
    sweep = np.ones(sweep_mib << 20, np.uint8)
    samples: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    time_texts(pipeline, texts[:16], "hot", 0.0, sweep)  # load what the first call loads
    for r in range(rounds):
        for k in range(len(WAYS)):
            way = WAYS[(r + k) % len(WAYS)]
            samples[way].append(time_texts(pipeline, texts, way, pause_ms / 1e3, sweep))
            if progress:
                progress(f"round {r + 1}, {way}: {samples[way][-1]}")
    out = {}
    for way, rows in samples.items():
        cell = {name: statistics.median(row[name] for row in rows) for name in RUNNERS}
        cell["total"] = statistics.median(sum(row[name] for name in RUNNERS) for row in rows)
        out[way] = cell
    return out


def table(result: dict[str, dict]) -> str:
    hot = result["hot"]["total"]
    lines = [
        "| way | " + " | ".join(f"{name} ms" for name in RUNNERS) + " | total ms | total / hot |",
        "|---" * (len(RUNNERS) + 3) + "|",
    ]
    for way in WAYS:
        cell = result[way]
        values = " | ".join(f"{cell[name]:.3f}" for name in RUNNERS)
        lines.append(f"| {way} | {values} | {cell['total']:.3f} | {cell['total'] / hot:.2f} |")
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine's architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", help="the set whose portable repository's runners are timed")
    parser.add_argument("--repository", help="an assembled repository instead")
    parser.add_argument("--texts", type=int, default=300, help="texts per way and round (default 300)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause-ms", type=float, default=2.0, help="idle pause before each text (default 2)")
    parser.add_argument("--sweep-mib", type=int, default=64, help="buffer swept before each text (default 64)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not args.artifacts and not args.repository:
        parser.error("give --artifacts or --repository")
    if args.texts < 1 or args.rounds < 1 or args.pause_ms < 0 or args.sweep_mib < 1:
        parser.error("--texts, --rounds and --sweep-mib must be positive, --pause-ms not negative")
    texts = default_texts()[0][: args.texts]
    with tempfile.TemporaryDirectory(prefix="bench-warmth-") as tmp:
        repo = args.repository or os.path.join(tmp, "repository")
        if not args.repository:
            repository.assemble(args.artifacts, repo, AssemblyOptions("portable"))
        pipeline = repository.repository_pipeline(repo)
        result = measure(
            pipeline, texts, args.rounds, args.pause_ms, args.sweep_mib, progress=lambda m: print(m, file=sys.stderr)
        )
    print(
        f"\n{args.rounds} rounds x {len(texts)} texts, one per call; idle pause {args.pause_ms:g} ms, sweep "
        f"{args.sweep_mib} MiB; {os.cpu_count()} CPUs, {cpu_model()}\n"
    )
    print(table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "result": result}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
