"""The GPU kit: what a lent GPU machine runs, in phases that each fit one `device` call
(at most 60 MiB carried, at most 6 minutes), and their dry runs on a CPU-only machine.

    python scripts/gpu_kit.py prepare                 # here: builds .gpu-check/{p01,p2a,p2b}
    python3 scripts/gpu_kit.py run --phase 0          # probe            (carry .gpu-check/p01)
    python3 scripts/gpu_kit.py run --phase 1          # gpu tests, benchmarks (carry .gpu-check/p01)
    python3 scripts/gpu_kit.py run --phase 2a         # unpack numpy 1.x + CuPy 13 (carry .gpu-check/p2a)
    python3 scripts/gpu_kit.py run --phase 2          # the real server (carry .gpu-check/p2b; right after 2a)
    ... run --phase 0,1 --cpu-dry-run                 # the same code here, without a GPU

The machine it is sized for (issue 16): one H200, driver 580 (CUDA 13), Python 3.12 with
torch, CuPy 14, numpy 2, tokenizers and transformers; no cuDF, Treelite or tritonclient; no
network; files survive between calls only while the machine stays warm (about 30 s).
Everything is written under $OUT (default .gpu-check/out): probe.json, gpu-tests.xml,
featurize.json, tokenize.json, serve.json, summary.md.

Phase 2 serves the `portable-gpu` repository (assembled here from the tiny artifact set:
a random 2-layer BERT, so its numbers measure the pipeline, not BERT) with the
pytriton wheel's tritonserver, whose Python 3.12 stub needs numpy < 2 and therefore CuPy
13.x (CuPy 14 refuses numpy 1): phase 2a unpacks those into /tmp/readability-kit-site,
phase 2 puts them first on the server's PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARRY = os.environ.get("READABILITY_KIT_CARRY") or os.path.join(ROOT, ".gpu-check")
SITE = "/tmp/readability-kit-site"
CARRY_LIMIT = 60 * 2**20
#: Modules the GPU machine lacks: blocked in a dry run, so that the dry run imports what
#: the machine can (rapidjson: tritonclient.grpc then raises RuntimeError, as it does there).
ABSENT_THERE = ("cudf", "treelite", "rapidjson", "gevent", "geventhttpclient", "sklearn")
TEXTS = [
    "A short and easy text.",
    "The cat sat on the mat. It was warm and the cat was happy.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor forthwith.",
    "Ünïcödé — “quotes”, and an em dash — here.",
    "Photosynthesis converts light energy into chemical energy.",
]


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


def _run(cmd, timeout, env=None, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)
    except subprocess.TimeoutExpired as exc:
        out, err = exc.stdout or "", exc.stderr or ""
        return subprocess.CompletedProcess(cmd, 124, str(out), str(err) + "\ntimed out")


# --------------------------------------------------------------------- phase 0


def _versions(env) -> dict:
    code = (
        "import importlib, json\nout = {}\n"
        "for name in ('numpy', 'cupy', 'torch', 'tokenizers', 'transformers', 'treelite', 'cudf', "
        "'tritonclient', 'google.protobuf', 'pytest', 'hypothesis'):\n"
        "    try:\n        m = importlib.import_module(name)\n"
        "        out[name] = getattr(m, '__version__', 'present')\n"
        "    except Exception as exc:\n        out[name] = f'missing ({type(exc).__name__})'\n"
        "print(json.dumps(out))"
    )
    result = _run([sys.executable, "-c", code], 120, env=env)
    return json.loads(result.stdout) if result.returncode == 0 else {"error": result.stderr[-500:]}


_IPC_CHILD = """
import sys, cupy, numpy
handle = bytes.fromhex(sys.argv[1]); n = int(sys.argv[2])
pointer = cupy.cuda.runtime.ipcOpenMemHandle(handle)
memory = cupy.cuda.UnownedMemory(pointer, n * 4, None)
array = cupy.ndarray((n,), cupy.float32, cupy.cuda.MemoryPointer(memory, 0))
print(float(array.sum()))
cupy.cuda.runtime.ipcCloseMemHandle(pointer)
"""


def cupy_ipc_check(env) -> dict:
    """Two processes share one GPU buffer through a CUDA IPC handle, as the python backend
    passes GPU tensors between the server and its stubs."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "why": f"no CuPy ({type(exc).__name__}: {exc})"}
    try:
        n = 1 << 20
        array = cupy.arange(n, dtype=cupy.float32)
        handle = cupy.cuda.runtime.ipcGetMemHandle(array.data.ptr)
        child = _run([sys.executable, "-c", _IPC_CHILD, bytes(handle).hex(), str(n)], 120, env=env)
        if child.returncode != 0:
            return {"ok": False, "why": child.stderr.strip()[-400:]}
        want = float(array.sum())
        return {
            "ok": abs(float(child.stdout.strip()) - want) < 1e-3 * want,
            "sum": float(child.stdout.strip()),
            "want": want,
        }
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}"}


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


def phase0(dry: bool, env) -> dict:
    started = time.time()
    smi = (
        _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 30)
        if shutil.which("nvidia-smi")
        else None
    )
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    probe: dict[str, Any] = {
        "dry_run": dry,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "gpu": (smi.stdout.strip() if smi and smi.returncode == 0 else "no nvidia-smi / no GPU"),
        "libpython": _libpython(),
        "libcuda": _libcuda(),
        "packages": _versions(env),
        "dev_shm_mib": {"total": shm.f_blocks * shm.f_frsize // 2**20, "free": shm.f_bavail * shm.f_frsize // 2**20}
        if shm
        else None,
        "cupy_ipc": {"ok": None, "why": "dry run: no GPU"} if dry else cupy_ipc_check(env),
    }
    probe["seconds"] = round(time.time() - started, 1)
    write_json("probe.json", probe)
    libpython = probe["libpython"]["found"] or "NOT FOUND"
    say(
        f"== phase 0: {probe['gpu']}; Python {probe['python']}; libpython {libpython}; "
        f"libcuda.so {probe['libcuda']['libcuda.so']}; /dev/shm {probe['dev_shm_mib']}; CUDA IPC {probe['cupy_ipc']}"
    )
    say("   packages: " + ", ".join(f"{k} {v}" for k, v in probe["packages"].items()))
    return probe


# --------------------------------------------------------------------- phase 1


def gpu_test_files() -> list[str]:
    """Test modules holding `gpu`-marked tests (collected explicitly: the rest of the suite
    needs packages the GPU machine lacks)."""
    folder = os.path.join(ROOT, "tests")
    return sorted(
        os.path.join("tests", name)
        for name in os.listdir(folder)
        if name.startswith("test_")
        and name.endswith(".py")
        and "mark.gpu" in open(os.path.join(folder, name), encoding="utf-8").read()
    )


def phase1(dry: bool, env, data: str | None) -> dict:
    result: dict = {"dry_run": dry}
    files = gpu_test_files()
    xml = os.path.join(out_dir(), "gpu-tests.xml")
    tests = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "gpu",
            "-rA",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            *files,
        ],
        240,
        env=env,
        cwd=ROOT,
    )
    with open(os.path.join(out_dir(), "gpu-tests.log"), "w", encoding="utf-8") as handle:
        handle.write(tests.stdout + tests.stderr)
    last = [
        line
        for line in tests.stdout.splitlines()
        if " in " in line and ("passed" in line or "skipped" in line or "failed" in line or "error" in line)
    ]
    result["tests"] = {"files": files, "exit": tests.returncode, "summary": last[-1] if last else tests.stdout[-300:]}
    say(f"== phase 1: gpu tests ({len(files)} files): {result['tests']['summary']} (exit {tests.returncode})")
    bench_env = dict(env)
    featurize = [
        sys.executable,
        "benchmarks/bench_featurize.py",
        "--batch-sizes",
        "64,2048",
        "--rounds",
        "2",
        "--min-seconds",
        "0.3",
        "--json",
        os.path.join(out_dir(), "featurize.json"),
    ]
    tokenize = [
        sys.executable,
        "benchmarks/bench_tokenize.py",
        "--batch-sizes",
        "64,2048",
        "--min-time",
        "0.5",
        "--paths",
        "cpu,gpu,array-numpy",
        "--json",
        os.path.join(out_dir(), "tokenize.json"),
    ]
    if os.environ.get("READABILITY_TRITON_TOKENIZER_DIR"):
        tokenize += ["--tokenizer", os.environ["READABILITY_TRITON_TOKENIZER_DIR"]]
    data = data or _bench_data()
    featurize += ["--data", data]
    tokenize += ["--data", data]
    carried = os.path.join(CARRY, "p01", "vocabulary.json")  # no scikit-learn there to build one
    demo = os.path.join(ROOT, ".cache", "demo-artifacts", "vocabulary.json")
    vocabulary = next((v for v in (carried, demo) if os.path.isfile(v)), None) or _build_vocabulary(data)
    if vocabulary:
        featurize += ["--vocabulary", vocabulary]
    if dry:
        featurize += ["--no-gpu", "--reference-texts", "50"]
    for name, cmd in (("featurize", featurize), ("tokenize", tokenize)):
        run = _run(cmd, 150, env=bench_env, cwd=ROOT)
        result[name] = {"exit": run.returncode, "tail": (run.stdout + run.stderr)[-1500:]}
        say(f"== phase 1: {name} benchmark exit {run.returncode}")
        say(run.stdout[-1200:])
    result["summary"] = summary_table()
    with open(os.path.join(out_dir(), "summary.md"), "w", encoding="utf-8") as handle:
        handle.write(result["summary"] + "\n")
    say(result["summary"])
    ok = result["tests"]["exit"] == 0 and result["featurize"]["exit"] == 0 and result["tokenize"]["exit"] == 0
    result["ok"] = ok
    write_json("phase1.json", result)
    return result


def _bench_data() -> str:
    """The benchmarks' texts: the shared CommonLit excerpts, else a generated corpus (a
    clean clone has no data)."""
    sys.path.insert(0, ROOT)
    from readability_triton.data import COMMONLIT_CSV

    if os.path.isfile(COMMONLIT_CSV):
        return os.path.normpath(COMMONLIT_CSV)
    import csv

    from readability_triton.artifacts.corpus import generate_corpus

    path = os.path.join(out_dir(), "corpus.csv")
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["excerpt"])
        writer.writerows([t] for t in generate_corpus(600)[0])
    return path


def _build_vocabulary(data: str) -> str | None:
    """A vocabulary.json from `data`, built here (where scikit-learn's stop words are)."""
    try:
        from readability_triton import features
        from readability_triton.data import read_table

        path = os.path.join(out_dir(), "vocabulary.json")
        features.build_vocabulary(read_table(data).texts).save(path)
        return path
    except Exception as exc:  # noqa: BLE001 - the benchmark then builds its own, or says why not
        say(f"   (no vocabulary built for the featurize benchmark: {type(exc).__name__}: {exc})")
        return None


def summary_table() -> str:
    def load(name):
        path = os.path.join(out_dir(), f"{name}.json")
        return json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None

    lines = []
    f = load("featurize")
    if f:
        lines += ["| featurize batch | per-text reference | NumPy | CuPy | texts/s, medians |", "|---|---|---|---|---|"]
        for r in f.get("results", []):
            cupy = f"{r['cupy']:,.0f}" if r.get("cupy") else "–"
            lines.append(f"| {r['batch_size']} | {r['reference']:,.0f} | {r['numpy']:,.0f} | {cupy} | |")
    t = load("tokenize")
    if t:
        lines += ["", "| tokenize path | batch | texts/s | routed to the CPU path |", "|---|---|---|---|"]
        for r in t.get("runs", []):
            routed = f"{100 * r['routed_to_cpu']:.1f}%" if "routed_to_cpu" in r else "–"
            lines.append(f"| {r['path']} | {r['batch']} | {r['texts_per_s']:,.0f} | {routed} |")
    return "\n".join(lines)


# --------------------------------------------------------------------- phase 2


def _extract(archive: str, into: str) -> None:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.12+ (and 3.10/3.11 security releases)
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)


def unpack_site() -> dict:
    """Phase 2a: numpy 1.x and CuPy 13.x for the stub, into SITE."""
    archive = os.path.join(CARRY, "p2a", "site.tar.xz")
    if not os.path.isfile(archive):
        raise SystemExit(f"no {archive}: run `python scripts/gpu_kit.py prepare` here and carry .gpu-check/p2a")
    os.makedirs(SITE, exist_ok=True)
    _extract(archive, SITE)
    listing = sorted(os.listdir(SITE))
    say(f"== phase 2a: unpacked {archive} into {SITE}: {', '.join(listing)}")
    return {"site": SITE, "entries": listing}


def _post(url: str, body: dict, timeout: float = 60.0) -> dict:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


def _infer(http: str, texts) -> dict:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": list(texts)}]}
    answer = _post(f"http://{http}/v2/models/readability/infer", body)
    return {o["name"]: [float(v) for v in o["data"]] for o in answer["outputs"]}


def _throughput(http: str, clients: int, seconds: float) -> dict:
    """`clients` closed loops of one-text KServe JSON requests (urllib: nothing to install on
    the GPU machine) on the package's one closed loop."""
    from readability_triton.client import load

    def work(client: int, i: int):
        began = time.perf_counter()
        try:
            _infer(http, [TEXTS[(client + i) % len(TEXTS)]])
        except Exception as exc:  # noqa: BLE001 - counted as an error
            return load.Outcome(began, time.perf_counter() - began, "good", False, str(exc)[:200])
        return load.Outcome(began, time.perf_counter() - began, "good", True)

    outcomes = load.closed_loop(work, clients, seconds)
    ok = [o for o in outcomes if o.ok]
    p50 = load.percentiles([o.latency for o in ok], (50,))["p50"] if ok else None
    return {"clients": clients, "texts_per_s": len(ok) / seconds, "p50_ms": p50, "errors": len(outcomes) - len(ok)}


def phase2(dry: bool, env) -> dict:
    sys.path.insert(0, ROOT)
    from readability_triton.repository import assemble as repository
    from readability_triton.server.tritonserver import TritonServer
    from readability_triton.stub.runtime import ARRIVALS_ENV

    p2b = os.path.join(CARRY, "p2b")
    work = tempfile.mkdtemp(prefix="readability-kit-")
    repo = os.path.join(work, "repository")
    shutil.copytree(os.path.join(p2b, "repository"), repo)
    expected = json.load(open(os.path.join(p2b, "expected.json"), encoding="utf-8"))
    if dry:
        repository.cpu_dry_run(repo)
    else:
        server_tar = os.path.join(p2b, "tritonserver.tar.xz")
        _extract(server_tar, SITE)
        sys.path.insert(0, SITE)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [SITE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
    arrivals = os.path.join(work, "arrivals")
    os.makedirs(arrivals)
    os.environ[ARRIVALS_ENV] = arrivals
    log = os.path.join(out_dir(), "server.log")
    server = TritonServer(repo, log_file=log, backend_dir=os.path.join(work, "backends"))
    result: dict = {"dry_run": dry, "profile": "portable-gpu" + (" (KIND_CPU: dry run)" if dry else "")}
    try:
        server.start(timeout=240)
        got = _infer(server.http_url, expected["texts"])
        diffs = {
            name: max(abs(a - b) for a, b in zip(got[name], expected[key]))
            for name, key in (("SCORE", "score"), ("BERT_SCORE", "bert"), ("FOREST_SCORE", "forest"))
        }
        result["max_abs_diff_vs_cpu"] = diffs
        result["scores_match"] = diffs["FOREST_SCORE"] == 0.0 and diffs["BERT_SCORE"] < 1e-4 and diffs["SCORE"] < 1e-4
        result["throughput"] = [_throughput(server.http_url, c, 5.0) for c in (1, 8, 32)]
    finally:
        result["stop_status"] = server.stop() if server.process is not None else None
    want = "cpu" if dry else "gpu"
    devices = {}
    for model in ("bert", "forest", "postprocess"):
        path = os.path.join(arrivals, f"{model}.json")
        devices[model] = json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None
    result["input_devices"] = devices
    result["inputs_on_expected_device"] = all(
        d is not None and all(c[want] >= 1 and c["cpu" if want == "gpu" else "gpu"] == 0 for c in d["inputs"].values())
        for d in devices.values()
    )
    text = open(log, encoding="utf-8", errors="replace").read() if os.path.isfile(log) else ""
    result["log"] = {
        needle: text.count(needle) for needle in ("Forcing CPU only", "CUDA IPC", "not healthy", "first inputs arrived")
    }
    result["ok"] = (
        bool(result.get("scores_match")) and result["inputs_on_expected_device"] and result["log"]["not healthy"] == 0
    )
    write_json("serve.json", result)
    say(
        f"== phase 2: scores vs the CPU pipeline {result.get('max_abs_diff_vs_cpu')}; inputs on {want}: "
        f"{result['inputs_on_expected_device']}; log {result['log']}"
    )
    for row in result.get("throughput", []):
        say(
            f"   {row['clients']:>3} clients: {row['texts_per_s']:.1f} texts/s, p50 {row['p50_ms']} ms, "
            f"{row['errors']} errors"
        )
    return result


# --------------------------------------------------------------------- running


def kit_env(dry: bool) -> dict:
    """The environment of the phases' subprocesses: the checkout and the carried files; in a
    dry run, the GPU machine's missing modules blocked."""
    env = dict(os.environ)
    p01 = os.path.join(CARRY, "p01")
    paths = [ROOT]
    if os.path.isdir(os.path.join(p01, "site")):
        paths.append(os.path.join(p01, "site"))
    if dry:
        blocker = tempfile.mkdtemp(prefix="kit-block-")
        with open(os.path.join(blocker, "sitecustomize.py"), "w", encoding="utf-8") as handle:
            handle.write(
                "import sys\nimport importlib.abc\n"
                f"BLOCKED = {ABSENT_THERE!r}\n"
                "class _Absent(importlib.abc.MetaPathFinder):\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name.split('.')[0] in BLOCKED:\n"
                "            raise ModuleNotFoundError(f'No module named {name!r} (GPU kit dry run: absent there)')\n"
                "        return None\n"
                "sys.meta_path.insert(0, _Absent())\n"
            )
        paths.insert(0, blocker)
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    for name, var in (
        ("triton_python_backend_utils.py", "READABILITY_TRITON_PB_UTILS"),
        ("tokenizer", "READABILITY_TRITON_TOKENIZER_DIR"),
        ("tiny-artifacts", "READABILITY_TRITON_TINY_ARTIFACTS"),
        ("train.csv", "READABILITY_TRITON_COMMONLIT"),
    ):
        if os.path.exists(os.path.join(p01, name)):
            env[var] = os.path.join(p01, name)
            os.environ[var] = env[var]
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--phase", default="0,1", help="comma-separated: 0, 1, 2a, 2 (default 0,1)")
    run.add_argument("--cpu-dry-run", action="store_true", help="the same steps on a machine without a GPU")
    prepare = sub.add_parser("prepare")
    prepare.add_argument("--python-version", default="3.12")
    prepare.add_argument("--only", default="p01,p2a,p2b", help="which carry folders (default all)")
    prepare.add_argument(
        "--no-server",
        action="store_true",
        help="p2b without the tritonserver archive (enough for phase 2's --cpu-dry-run)",
    )
    args = parser.parse_args(argv)
    if args.command == "prepare":
        from gpu_kit_prepare import prepare as do_prepare

        return do_prepare(args.python_version, tuple(p for p in args.only.split(",") if p), server=not args.no_server)
    dry = args.cpu_dry_run
    phases = [p.strip() for p in args.phase.split(",") if p.strip()]
    if "2" in phases and not dry and os.environ.get("READABILITY_KIT_SITE_FIRST") != "1":
        # The server's stub needs numpy < 2, and so does this process (the server checks its
        # own numpy before starting one): run phase 2 with the unpacked site first.
        if not os.path.isdir(SITE):
            parser.error(f"no {SITE}: run phase 2a first (carry .gpu-check/p2a), then phase 2 within 30 s")
        env = dict(
            os.environ,
            READABILITY_KIT_SITE_FIRST="1",
            PYTHONPATH=os.pathsep.join([SITE, ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        rest = [p for p in phases if p != "2"]
        status = main(["run", "--phase", ",".join(rest)]) if rest else 0
        return status | subprocess.call([sys.executable, os.path.abspath(__file__), "run", "--phase", "2"], env=env)
    env = kit_env(dry)
    shared_data: str | None = os.path.join(CARRY, "p01", "train.csv")
    data = shared_data if shared_data and os.path.isfile(shared_data) else None
    ok = True
    started = time.time()
    for phase in phases:
        if phase == "0":
            phase0(dry, env)
        elif phase == "1":
            ok &= bool(phase1(dry, env, data)["ok"])
        elif phase == "2a":
            unpack_site()
        elif phase == "2":
            ok &= bool(phase2(dry, env)["ok"])
        else:
            parser.error(f"unknown phase {phase!r}")
    say(
        f"== done: phases {','.join(phases)}{' (cpu dry run)' if dry else ''} in {time.time() - started:.0f} s, "
        f"{'ok' if ok else 'FAILED'}; results in {out_dir()}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
