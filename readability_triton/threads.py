"""The thread plan: how many threads each step's runtimes may use, so that the steps of one
server do not take each other's cores.

Every Python model of a repository is a process of its own (a python-backend stub) on the
same cores. Left alone, each runtime sizes its pools to all of them: ONNX Runtime's and
torch's intra-op pools, OpenMP's (Treelite's GTIL, torch), OpenBLAS's, the tokenizers'
Rayon pool. Idle OpenMP threads spin by default (`OMP_WAIT_POLICY` ACTIVE), and a spinning
forest step took cores from BERT: measured on 2 cores, the forest's compute fell from 6.5 to
0.85 ms per request and BERT's from 55.7 to 47.5 ms with OpenMP waiting passively.

So: BERT, where the time goes, gets the instance's share of the cores (`THREADS` 0: the
cores this process may run on, divided by the model's instance count); every other step
gets 1 thread (`THREADS` 1); OpenMP waits passively everywhere. `apply(n)` runs in
`initialize`, before a runner imports its runtime, because OpenMP and Rayon read their
environment once, when they start; ONNX Runtime, torch and GTIL also take `n` explicitly.
"""

from __future__ import annotations

import os

#: `off` in the server's environment: no plan at all (every runtime sizes itself, OpenMP's
#: own wait policy); for comparisons (benchmarks/bench_profiles.py).
PLAN_ENV = "READABILITY_TRITON_THREAD_PLAN"


def enabled() -> bool:
    return os.environ.get(PLAN_ENV, "on").lower() != "off"


#: Environment variables that size (or quiet) a runtime's pool when it starts.
_SIZED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS")


def cores() -> int:
    """The CPUs this process may run on (its affinity; a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def share(instances: int = 1) -> int:
    """One instance's share of the cores, at least 1."""
    return max(1, cores() // max(1, instances))


def resolve(threads: int, instances: int = 1) -> int:
    """`threads`, or for 0 the instance's share of the cores."""
    return threads if threads > 0 else share(instances)


def apply(threads: int) -> dict[str, str]:
    """Size the runtimes this process will start to `threads` and let idle OpenMP threads
    sleep: sets the environment they read when they start (before they are imported). A
    value the user set in the server's environment wins. Returns what it set."""
    wanted = {name: str(threads) for name in _SIZED}
    wanted["OMP_WAIT_POLICY"] = "PASSIVE"
    wanted["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    done = {}
    for name, value in wanted.items():
        if name not in os.environ:
            os.environ[name] = value
            done[name] = value
    return done
