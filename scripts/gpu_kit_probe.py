"""Phase 0 of the GPU kit: what the lent machine has (GPU, Python, libpython, libcuda,
packages, /dev/shm), whether two processes share GPU memory through CUDA IPC, and whether
the machine's torch reads the carried model.pt (and which torch wrote it)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

from gpu_kit_common import CARRY, MODEL_PT_CHECK, Deadline, run_for, say, torchscript_format

_VERSIONS = """
import importlib, json
out = {}
for name in ('numpy', 'cupy', 'torch', 'tokenizers', 'transformers', 'treelite', 'cudf', 'tritonclient',
             'google.protobuf', 'pytest', 'hypothesis'):
    try:
        m = importlib.import_module(name)
        out[name] = getattr(m, '__version__', 'present')
    except Exception as exc:
        out[name] = f'missing ({type(exc).__name__})'
print(json.dumps(out))
"""


def _versions(env, seconds: float) -> dict:
    result = run_for([sys.executable, "-c", _VERSIONS], seconds, env=env)
    return json.loads(result.stdout) if result.returncode == 0 else {"error": result.stderr[-500:]}


#: The child's side of the IPC check: opens the handle, copies the buffer to the host, sums it.
_IPC_CHILD = """
import sys, numpy
from cupy.cuda import runtime
handle, n = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
pointer = runtime.ipcOpenMemHandle(handle)
host = numpy.empty(n, numpy.float32)
runtime.memcpy(host.ctypes.data, pointer, host.nbytes, runtime.memcpyDeviceToHost)
runtime.ipcCloseMemHandle(pointer)
print(float(host.sum(dtype=numpy.float64)))
"""


def cupy_ipc_check(env, seconds: float) -> dict:
    """Two processes share one GPU buffer through a CUDA IPC handle, as the python backend
    passes GPU tensors between the server and its stubs. The buffer is a cudaMalloc of its
    own, outside CuPy's memory pool: an IPC handle names a whole allocation, so the child
    finds the data at offset 0 of what it opens."""
    try:
        import numpy
        from cupy.cuda import runtime
    except Exception as exc:  # noqa: BLE001 - any failure to import means: no CuPy here
        return {"ok": False, "why": f"no CuPy ({type(exc).__name__}: {exc})"}
    try:
        host = numpy.arange(1 << 20, dtype=numpy.float32)
        pointer = runtime.malloc(host.nbytes)
        try:
            runtime.memcpy(pointer, host.ctypes.data, host.nbytes, runtime.memcpyHostToDevice)
            handle = bytes(runtime.ipcGetMemHandle(pointer))
            child = run_for([sys.executable, "-c", _IPC_CHILD, handle.hex(), str(host.size)], seconds, env=env)
        finally:
            runtime.free(pointer)
        if child.returncode != 0:
            return {"ok": False, "why": child.stderr.strip()[-400:]}
        got, want = float(child.stdout.strip()), float(host.sum(dtype=numpy.float64))
        return {"ok": got == want, "sum": got, "want": want}
    except Exception as exc:  # noqa: BLE001 - reported in probe.json
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}"}


def model_pt_check(p01: str, env, seconds: float, dry: bool) -> dict:
    """Whether this machine's torch (on the GPU; on the CPU in a dry run) loads the carried
    model.pt and computes what the torch that wrote it computed (recorded by `prepare` in
    p01/kit.json), and which torch that was."""
    path = os.path.join(p01, "tiny-artifacts", "model.pt")
    if not os.path.isfile(path) or not os.path.isfile(os.path.join(p01, "kit.json")):
        if dry:
            return {"ok": None, "why": "dry run without a prepared p01"}
        return {"ok": False, "why": f"no {path} or p01/kit.json: run `gpu_kit.py prepare` and carry .gpu-check/p01"}
    with open(os.path.join(p01, "kit.json"), encoding="utf-8") as handle:
        written = json.load(handle)["model_pt"]
    report: dict[str, Any] = {
        "written_by": f"torch {written['torch']} (TorchScript file format {torchscript_format(path)})",
    }
    run = run_for([sys.executable, "-c", MODEL_PT_CHECK, path, "cpu" if dry else "cuda"], seconds, env=env)
    if run.returncode != 0:
        report.update(
            ok=False,
            why=(
                f"this machine's torch cannot run model.pt, written by {report['written_by']}: "
                f"{run.stderr.strip()[-600:]}. Build the kit's set with a torch no newer than this machine's "
                "(a venv with that torch, then `gpu_kit.py prepare --only p01,p2`)"
            ),
        )
        return report
    read = json.loads(run.stdout.strip().splitlines()[-1])
    diff = max(abs(a - b) for a, b in zip(read["outputs"], written["outputs"]))
    report.update(read_by=f"torch {read['torch']}", max_abs_diff=diff, ok=diff <= 1e-4)
    return report


def _libpython() -> dict:
    import sysconfig

    libdir, name = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY") or ""
    soname = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    found = [p for p in (os.path.join(libdir or "", soname), os.path.join(libdir or "", name)) if os.path.isfile(p)]
    return {
        "libdir": libdir,
        "soname": soname,
        "found": found,
        "shared": bool(sysconfig.get_config_var("Py_ENABLE_SHARED")),
    }


def _libcuda() -> dict:
    import ctypes

    out = {}
    for name in ("libcuda.so", "libcuda.so.1"):
        try:
            ctypes.CDLL(name)
            out[name] = "loads"
        except OSError as exc:
            out[name] = f"missing ({exc})"
    return out


def phase0(result: dict, dry: bool, env, deadline: Deadline) -> None:
    """Fills `result` (probe.json): ok where CUDA IPC works and model.pt runs (on the CPU in
    a dry run, where IPC is not tried)."""
    smi = (
        run_for(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            deadline.share("0", "nvidia-smi"),
        )
        if shutil.which("nvidia-smi")
        else None
    )
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    result.update(
        dry_run=dry,
        python=sys.version.split()[0],
        executable=sys.executable,
        gpu=smi.stdout.strip() if smi and smi.returncode == 0 else "no nvidia-smi / no GPU",
        libpython=_libpython(),
        libcuda=_libcuda(),
        dev_shm_mib={"total": shm.f_blocks * shm.f_frsize // 2**20, "free": shm.f_bavail * shm.f_frsize // 2**20}
        if shm
        else None,
    )
    result["packages"] = _versions(env, deadline.share("0", "versions"))
    ipc = deadline.share("0", "cuda ipc")
    result["cupy_ipc"] = {"ok": None, "why": "dry run: no GPU"} if dry else cupy_ipc_check(env, ipc)
    result["model_pt"] = model_pt_check(os.path.join(CARRY, "p01"), env, deadline.share("0", "model.pt"), dry)
    failed = [f"{name}: {result[name].get('why')}" for name in ("cupy_ipc", "model_pt") if result[name]["ok"] is False]
    result["ok"] = not failed
    if failed:
        result["error"] = "; ".join(failed)
    say(
        f"== phase 0: {result['gpu']}; Python {result['python']}; "
        f"libpython {result['libpython']['found'] or 'NOT FOUND'}; "
        f"libcuda.so {result['libcuda']['libcuda.so']}; /dev/shm {result['dev_shm_mib']}; "
        f"CUDA IPC {result['cupy_ipc']}"
    )
    say(f"   model.pt: {result['model_pt']}")
    say("   packages: " + ", ".join(f"{k} {v}" for k, v in result["packages"].items()))
