"""What every part of the GPU kit shares: where things are, the plan of its device calls
(which phases each call runs, what it carries, the deadline and each step's share of it),
the deadline itself, the result files, and the model.pt check that `prepare` runs here and
phase 0 runs on the machine. It imports no other kit module: the kit's imports run one way
(gpu_kit -> gpu_kit_probe, gpu_kit_serve, gpu_kit_prepare -> gpu_kit_common).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # the checkout's readability_triton (the machine has no install of it)
CARRY = os.environ.get("READABILITY_KIT_CARRY") or os.path.join(ROOT, ".gpu-check")
#: numpy 1.x and CuPy 13 for the stub (phase 2a), and the tritonserver (phase 2): files on
#: the machine survive between calls only while it stays warm.
SITE = os.environ.get("READABILITY_KIT_SITE") or "/tmp/readability-kit-site"
TEXTS = [
    "A short and easy text.",
    "The cat sat on the mat. It was warm and the cat was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor forthwith.",
    "Ünïcödé — “quotes”, and an em dash — here.",
    "Photosynthesis converts light energy into chemical energy.",
]

# ------------------------------------------------------------------ the plan

#: What one device call may run (the tool's timeout_s at most), and what it may carry: the
#: checkout and the carried folders together.
CALL_SECONDS = 600
CALL_CARRY_BYTES = 64 * 2**20
#: Each call's deadline: the steps below share it out, so a call ends well inside CALL_SECONDS.
DEADLINE_S = 540
#: Each step's share of the deadline, at most (seconds), per phase.
STEPS: dict[str, tuple[tuple[str, int], ...]] = {
    "0": (("nvidia-smi", 15), ("versions", 45), ("cuda ipc", 40), ("model.pt", 60)),
    "1": (("gpu tests", 200), ("featurize benchmark", 60), ("tokenize benchmark", 60)),
    "2a": (("unpack", 25), ("imports and kernels", 45)),
    "2": (
        ("unpack", 20),
        ("server start", 150),
        ("scores", 30),
        ("throughput", 45),
        ("stop", 30),
        ("hybrid start", 90),
        ("hybrid throughput", 45),
        ("hybrid stop", 30),
    ),
}
RESULT_FILES = {"0": "probe.json", "1": "phase1.json", "2a": "phase2a.json", "2": "serve.json"}


@dataclass(frozen=True)
class Call:
    """One device call: its phases, and the folders under CARRY it carries."""

    phases: tuple[str, ...]
    carries: tuple[str, ...]
    note: str = ""

    @property
    def steps_seconds(self) -> int:
        return sum(seconds for phase in self.phases for _, seconds in STEPS[phase])

    def command(self) -> str:
        return f"bash scripts/gpu-check.sh --phase {','.join(self.phases)}"


CALLS = (
    Call(("0", "1"), ("p01",)),
    Call(("2a", "2"), ("p2",), "self-contained: 2a unpacks the stub's site that 2 serves with"),
)


def tree_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def checkout_bytes() -> int:
    """What the device tool sends beside the carried folders: tracked files and untracked
    ones git does not ignore (0 where this is no git checkout, as on the machine)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    names = {n for n in listed.decode("utf-8", "replace").split("\0") if n}
    return sum(os.path.getsize(os.path.join(ROOT, n)) for n in names if os.path.isfile(os.path.join(ROOT, n)))


def describe_call(call: Call, number: int, carry_root: str = CARRY) -> tuple[str, int | None]:
    """One line on `call` (phases, deadline, carry), and the bytes it carries (None until
    every carried folder is prepared)."""
    folders = [os.path.join(carry_root, name) for name in call.carries]
    missing = [f for f in folders if not os.path.exists(f)]
    if missing:
        carry, total = f"{', '.join(call.carries)} (not prepared: run `gpu_kit.py prepare`)", None
    else:
        sizes = {name: tree_bytes(f) for name, f in zip(call.carries, folders)}
        checkout = checkout_bytes()
        total = sum(sizes.values()) + checkout
        parts = " + ".join(f"{name} {size / 2**20:.1f}" for name, size in sizes.items())
        carry = (
            f"{parts} + checkout {checkout / 2**20:.1f} = {total / 2**20:.1f} MiB of {CALL_CARRY_BYTES // 2**20} MiB"
        )
    phases = f"phase{'s' if len(call.phases) > 1 else ''} {','.join(call.phases)}"
    line = (
        f"call {number}: {phases}; deadline {DEADLINE_S} s (steps {call.steps_seconds} s, timeout_s {CALL_SECONDS}); "
        f"carry {carry}; run `{call.command()}`" + (f"; {call.note}" if call.note else "")
    )
    return line, total


def call_of(phases) -> tuple[int, Call] | None:
    for number, call in enumerate(CALLS, 1):
        if tuple(phases) == call.phases:
            return number, call
    return None


# ------------------------------------------------------------------ the deadline


class Deadline:
    """One deadline for a whole call (an absolute time, so that a phase re-run in a child
    process shares it), shared out among the steps: each gets its share from STEPS, or what
    is left if that is less."""

    ENV = "READABILITY_KIT_DEADLINE_AT"

    def __init__(self, at: float, clock=time.time):
        self.at, self.clock = at, clock

    @classmethod
    def after(cls, seconds: float, clock=time.time) -> "Deadline":
        return cls(clock() + seconds, clock)

    @classmethod
    def from_environment(cls, seconds: float) -> "Deadline":
        at = os.environ.get(cls.ENV)
        return cls(float(at)) if at else cls.after(seconds)

    def left(self) -> float:
        return max(0.0, self.at - self.clock())

    def share(self, phase: str, step: str) -> float:
        """The seconds step `step` of `phase` may take: its share, or what is left."""
        return min(float(dict(STEPS[phase])[step]), self.left())


def run_for(cmd, seconds: float, env=None, **kw) -> subprocess.CompletedProcess:
    """`cmd` for at most `seconds` (exit 124 when it ran out, or when no time was left)."""
    if seconds < 1:
        return subprocess.CompletedProcess(cmd, 124, "", "not run: the call's deadline was reached")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=seconds, env=env, **kw)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess(cmd, 124, out, err + f"\ntimed out after {seconds:.0f} s")


# ------------------------------------------------------------------ output


def say(message: str) -> None:
    print(message, flush=True)


def out_dir() -> str:
    path = os.environ.get("OUT") or os.path.join(CARRY, "out")
    os.makedirs(path, exist_ok=True)
    return path


def write_json(name: str, value) -> str:
    path = os.path.join(out_dir(), name)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, default=str)
    return path


# ------------------------------------------------------------------ model.pt

#: The newest TorchScript file format the machine's torch (2.11) reads: 10, what every torch
#: from 1.12 to 2.13 reads and writes for a BERT trace (aten::gelu's upgrader set it).
MACHINE_TORCHSCRIPT_FORMAT = 10

#: Loads a TorchScript file and runs it on a fixed batch: `python -c MODEL_PT_CHECK model.pt
#: cpu|cuda` prints {"torch", "outputs"} as JSON. `prepare` runs it here (the torch that
#: wrote the file), phase 0 on the machine (the torch that must read it).
MODEL_PT_CHECK = """
import json, sys, warnings
import torch
warnings.simplefilter("ignore")
path, device = sys.argv[1], sys.argv[2]
model = torch.jit.load(path, map_location=device).eval()
length = 16
ids = (torch.arange(2 * length).reshape(2, length) % 1000 + 1000).to(device)
ids[:, 0], ids[:, -1] = 101, 102
mask = torch.ones_like(ids)
mask[1, length // 2:] = 0
with torch.no_grad():
    out = model(ids, mask)
print(json.dumps({"torch": torch.__version__, "outputs": out.float().cpu().reshape(-1).tolist()}))
"""


def torchscript_format(path: str) -> int:
    """The file format version a TorchScript archive records (`<name>/version`, or
    `<name>/.data/version` in newer torch)."""
    with zipfile.ZipFile(path) as archive:
        found = [
            int(archive.read(name).decode().strip())
            for name in archive.namelist()
            if name.count("/") in (1, 2) and name.endswith(("/version", "/.data/version"))
        ]
    if not found:
        raise ValueError(f"{path}: no version record: not a TorchScript archive")
    return max(found)
