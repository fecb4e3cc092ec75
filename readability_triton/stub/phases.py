"""Where a Python model's `execute` time goes, added up in the stub: the admission gate,
reading the requests, the runner, and answering (splitting, checks on the outputs, building
the responses). Off unless the server's environment names a folder (`PHASES_ENV`); then
every instance of a Python model writes its running totals to
`<folder>/<instance>.phases.json`, at most every `WRITE_EVERY_S` seconds, at the end of an
execute (`benchmarks/bench_overhead.py --steps` reads them around its rounds). The writing
is timed apart (`write`), so that a reader can tell it from the hand-over outside execute.
Off, it costs one `is None` test per execute.

An execute the admission gate refuses (UNAVAILABLE while the pipeline is full) counts like
any other: its time is the gate's and the answer's. On a GPU instance the runner's kernels
may finish after it returns (CUDA runs asynchronously): their time then shows in `answer`,
where the outputs are handed over.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

#: A folder where every Python model writes its phase totals (unset in production).
PHASES_ENV = "READABILITY_TRITON_PHASES_DIR"
#: The phases of one execute, in order; `answer` is what is left after the runner.
PHASES = ("gate", "read", "run", "answer")
#: The longest a model's totals on file lag behind (seconds): a reader that sends one more
#: request after this long reads them whole.
WRITE_EVERY_S = 0.2


def phases_file(folder: str, instance: str) -> str:
    return os.path.join(folder, f"{instance}.phases.json")


class Phases:
    """Running totals of one model's executes: `measure(n_requests, body)` runs
    `body(mark)`; `body` calls `mark("gate")` and `mark("read")` as each phase ends, and
    runs its runner through `runner(...)`; the rest of the execute counts as `answer`."""

    def __init__(
        self,
        folder: str,
        model: str,
        instance: str = "",
        every: float = WRITE_EVERY_S,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.instance = instance or model
        self.path = phases_file(folder, self.instance)
        self.model, self.every, self.clock = model, every, clock
        self.executes = 0
        self.requests = 0
        self.seconds = dict.fromkeys(("execute", *PHASES, "write"), 0.0)
        self._last = 0.0
        self._written = -float("inf")

    @classmethod
    def from_environment(cls, model: str, instance: str = "") -> "Phases | None":
        """The clock, where the environment names a folder (`PHASES_ENV`); else None. `instance`:
        Triton's name for this instance (`model_instance_name`), one file each."""
        folder = os.environ.get(PHASES_ENV)
        return cls(folder, model, instance) if folder else None

    def mark(self, phase: str) -> None:
        now = self.clock()
        self.seconds[phase] += now - self._last
        self._last = now

    def runner(self, runner):
        """`runner`, its calls timed as `run` (and left out of `answer`)."""

        def timed(*args):
            began = self.clock()
            try:
                return runner(*args)
            finally:
                self.seconds["run"] += self.clock() - began

        return timed

    def measure(self, n_requests: int, body):
        began = self._last = self.clock()
        run_before = self.seconds["run"]
        try:
            return body(self.mark)
        finally:
            end = self.clock()
            self.seconds["answer"] += end - self._last - (self.seconds["run"] - run_before)
            self.seconds["execute"] += end - began
            self.executes += 1
            self.requests += n_requests
            if end - self._written >= self.every:
                self._written = end
                self.write()
                self.seconds["write"] += self.clock() - end

    def snapshot(self) -> dict:
        return {
            "model": self.model,
            "instance": self.instance,
            "executes": self.executes,
            "requests": self.requests,
            "ms": {name: seconds * 1e3 for name, seconds in self.seconds.items()},
        }

    def write(self) -> None:
        """The totals to `path`, replaced whole (a reader never sees half a file)."""
        partial = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                json.dump(self.snapshot(), handle)
            os.replace(partial, self.path)
        except OSError:
            pass  # a measurement aid: never a request's failure


def read_phases(folder: str) -> dict[str, dict]:
    """{model: the last written totals of its instances, added up} of every `*.phases.json`
    in `folder` (a file that is not one is skipped)."""
    out: dict[str, dict] = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".phases.json"):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                found = json.load(handle)
            model, executes, requests = found["model"], int(found["executes"]), int(found["requests"])
            ms = {key: float(value) for key, value in found["ms"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        total = out.setdefault(model, {"model": model, "executes": 0, "requests": 0, "ms": {}})
        total["executes"] += executes
        total["requests"] += requests
        for key, value in ms.items():
            total["ms"][key] = total["ms"].get(key, 0.0) + value
    return out


def phase_rows(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict[str, float]]:
    """{model: ms per execute of `execute`, of each phase and of `write`, and requests per
    execute} between two `read_phases` snapshots (models without an execute between them
    left out)."""
    out = {}
    for model, a in after.items():
        b = before.get(model, {"executes": 0, "requests": 0, "ms": {}})
        executes = a["executes"] - b["executes"]
        if executes <= 0:
            continue
        row = {
            name: (a["ms"].get(name, 0.0) - b["ms"].get(name, 0.0)) / executes for name in ("execute", *PHASES, "write")
        }
        row["requests_per_execute"] = (a["requests"] - b["requests"]) / executes
        out[model] = row
    return out
