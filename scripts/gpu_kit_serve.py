"""Phases 2a and 2 of the GPU kit, one call: the carried numpy 1.x and CuPy 13 for the stub of
the pytriton wheel's tritonserver (2a: unpacked, imported with the machine's torch; CuPy's
reductions, scans and DLPack both ways; the project's CUDA kernels compiled by that CuPy and
checked against NumPy), then that server on the `portable-gpu` repository, and on the same
repository with the Python steps on the CPU (the `hybrid` split) (2)."""

from __future__ import annotations

import glob
import importlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time

from gpu_kit_common import CARRY, ROOT, SITE, TEXTS, Deadline, out_dir, run_for, say

#: Set to 1, the GPU tokenizer raises where it would fall back to the CPU path
#: (readability_triton.tokenizer.wordpiece): in the kit, a fallback is a failure.
REQUIRE_GPU_TOKENIZER = "READABILITY_TRITON_REQUIRE_GPU_TOKENIZER"
#: What phase 2 counts in the server log; the last two fail it (the second is what a GPU
#: preprocess instance logs when it tokenizes on the CPU).
LOG_COUNTED = ("Forcing CPU only", "CUDA IPC", "first inputs arrived", "not healthy", "tokenizes on the CPU")
LOG_PROBLEMS = LOG_COUNTED[-2:]


def extract(archive: str, into: str) -> None:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.12+ (and 3.10/3.11 security releases)
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)


#: Modules of the GPU machine built for its numpy 2, which the carried numpy 1.x cannot load
#: and CuPy 13 imports when it finds them (`import cupy` -> cupyx.scipy.sparse -> scipy,
#: which fails with an AttributeError, not the ImportError CuPy allows for: the kit's
#: first run on an H200). The site shadows each with a module that raises ImportError.
NUMPY2_ONLY = ("scipy",)


def shadow_numpy2_modules(site: str) -> list[str]:
    """Write into `site` a package for each of NUMPY2_ONLY that raises ImportError, saying
    why; the names written."""
    for name in NUMPY2_ONLY:
        os.makedirs(os.path.join(site, name), exist_ok=True)
        with open(os.path.join(site, name, "__init__.py"), "w", encoding="utf-8") as handle:
            handle.write(
                f"raise ImportError({name!r} ' of the GPU machine is built for numpy 2, and the stub runs the "
                f"carried numpy 1.x (scripts/gpu_kit_serve.py, NUMPY2_ONLY)')\n"
            )
    return list(NUMPY2_ONLY)


def cuda_library_dirs(roots=None) -> list[str]:
    """The folders holding NVRTC and the CUDA runtime: the NVIDIA wheels' `nvidia/*/lib`
    (CUDA 13 puts them all in nvidia/cu13/lib) under `roots` (default sys.path), else a
    CUDA toolkit's lib64. CuPy 13 finds libnvrtc.so.13 only through the loader's path."""
    found: list[str] = []
    for root in sys.path if roots is None else roots:
        for lib in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib"))):
            if glob.glob(os.path.join(lib, "libnvrtc.so*")) or glob.glob(os.path.join(lib, "libcudart.so*")):
                if os.path.realpath(lib) not in found:
                    found.append(os.path.realpath(lib))
    if not any(glob.glob(os.path.join(lib, "libnvrtc.so*")) for lib in found):
        for toolkit in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
            lib = os.path.join(toolkit or "", "lib64")
            if toolkit and glob.glob(os.path.join(lib, "libnvrtc.so*")):
                found.append(os.path.realpath(lib))
                break
    return found


def stub_env(base=None, roots=None, site: bool = True) -> dict:
    """The environment of phase 2's server, and so of its stubs (2a checks the same): the
    carried numpy and CuPy first on PYTHONPATH (unless not `site`), then the checkout; NVRTC
    and the CUDA runtime on LD_LIBRARY_PATH; the GPU tokenizer's CPU fallback refused."""

    def joined(first, rest):
        return os.pathsep.join(list(first) + [p for p in rest.split(os.pathsep) if p and p not in first])

    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = joined([SITE, ROOT] if site else [ROOT], env.get("PYTHONPATH", ""))
    env["LD_LIBRARY_PATH"] = joined(cuda_library_dirs(roots), env.get("LD_LIBRARY_PATH", ""))
    env[REQUIRE_GPU_TOKENIZER] = "1"
    env["CUPY_CACHE_DIR"] = CUPY_CACHE  # what 2a compiled, phase 2's stubs find compiled
    return env


#: CuPy's kernel cache on the machine: emptied by phase 2a (which compiles for real), then
#: shared with phase 2's stubs, so that the server's start does not compile again.
CUPY_CACHE = SITE.rstrip(os.sep) + "-cupy-cache"


#: Run with the stub's environment: the carried numpy and CuPy, one kernel compiled through
#: NVRTC before torch is imported (torch would load NVRTC itself), a reduction and a scan,
#: the project's kernel files compiled by this CuPy and run against NumPy (features and
#: formulas, WordPiece with the repository's tokenizer, the forest), then DLPack from CuPy to
#: torch and back. Prints {"numpy", "cupy", "kernel", "kernels", "torch", "problems"} as JSON.
_SITE_CHECK = """
import json, os, sys
site, gpu = os.path.realpath(sys.argv[1]), sys.argv[2] == "gpu"

def _kernels_check(cupy, tokenizer_dir):
    import numpy as np
    from readability_triton.features import Vocabulary
    from readability_triton.features.extract import served_outputs
    from readability_triton.features.formulas import Formulas
    from readability_triton.forest.arrays import ArrayForestRunner
    from readability_triton.kernels import source
    from readability_triton.tokenizer import WordPieceTokenizer
    texts = TEXTS * 20
    result = {"compiled": [name for name in source.SOURCES if source.compiled(cupy, name)], "problems": []}
    vocabulary = Vocabulary(["the", "and", "a"], ["cat", "light", "lessor"], ["the", "and", "a", "it"])
    formulas = Formulas.load()
    want, got = served_outputs(texts, vocabulary, formulas), served_outputs(texts, vocabulary, formulas, xp=cupy)
    same = [np.array_equal(cupy.asnumpy(g).view(np.uint32), w.view(np.uint32)) for g, w in zip(got, want)]
    result["featurize"] = all(same)
    tokenizer = WordPieceTokenizer.from_directory(tokenizer_dir, 64)
    ids, mask = tokenizer.encode(texts, xp=cupy)
    cpu_ids, cpu_mask = tokenizer.encode_cpu(texts)
    result["wordpiece"] = bool((cupy.asnumpy(ids) == cpu_ids).all() and (cupy.asnumpy(mask) == cpu_mask).all())
    rng = np.random.default_rng(0)
    arrays = {"feature": np.array([0, 0, 0]), "threshold": np.array([0.5, 0.0, 0.0]), "left": np.array([1, 1, 2])}
    arrays.update(right=np.array([2, 1, 2]), value=np.array([0.0, -1.0, 2.0]), roots=np.array([0, 0]))
    arrays.update(less_equal=np.ones(3, bool), default_left=np.ones(3, bool), leaf=np.array([False, True, True]))
    meta = {"n_features": 1, "n_trees": 2, "depth": 1, "average": True, "base_score": 0.25}
    x = rng.normal(size=(100, 1)).astype(np.float32)
    walk = ArrayForestRunner(arrays, meta)
    on_gpu = ArrayForestRunner(arrays, meta, device="gpu")
    result["forest"] = bool((cupy.asnumpy(on_gpu(cupy.asarray(x))) == walk(x)).all())
    result["problems"] = [k for k in ("featurize", "wordpiece", "forest") if not result[k]]
    return result

def carried(module):
    return os.path.realpath(module.__file__).startswith(site + os.sep)
out, problems = {}, []
import numpy
out["numpy"] = {"version": numpy.__version__, "carried": carried(numpy)}
if not numpy.__version__.startswith("1."):
    problems.append(f"numpy {numpy.__version__}: the stub needs numpy < 2")
try:
    import cupy
except ImportError as exc:
    cupy, out["cupy"] = None, f"missing ({exc})"
    if gpu:
        problems.append(f"no CuPy: {exc}")
if cupy is not None:
    out["cupy"] = {"version": cupy.__version__, "carried": carried(cupy)}
if gpu:
    for name in ("numpy", "cupy"):
        if not isinstance(out[name], dict) or not out[name]["carried"]:
            problems.append(f"{name} is not the carried one in {site}")
if gpu and cupy is not None:
    kernel = cupy.ElementwiseKernel("float32 x", "float32 y", "y = 2.0f * x + 1.0f", "readability_kit_phase_2a")
    y = kernel(cupy.arange(1024, dtype=cupy.float32))
    right = bool((cupy.asnumpy(y) == 2 * numpy.arange(1024, dtype=numpy.float32) + 1).all())
    out["kernel"] = {"right": right, "nvrtc": list(cupy.cuda.nvrtc.getVersion())}
    if not right:
        problems.append("the compiled kernel computed a wrong result")
    a = cupy.arange(1, 1001, dtype=cupy.int64)
    out["reductions_and_scans"] = int(a.sum()) == 500500 and int(cupy.cumsum(a)[-1]) == 500500
    if not out["reductions_and_scans"]:
        problems.append("a CuPy sum or cumsum was wrong")
    try:
        out["kernels"] = _kernels_check(cupy, sys.argv[3])
        problems += [f"kernels: {p}" for p in out["kernels"]["problems"]]
    except Exception as exc:
        out["kernels"] = f"{type(exc).__name__}: {exc}"
        problems.append(f"the project's kernels failed: {out['kernels']}")
import torch
out["torch"] = {"version": torch.__version__, "cuda": torch.cuda.is_available()}
if gpu and cupy is not None:
    out["torch"]["dlpack"] = bool(torch.equal(torch.from_dlpack(y)[:3].cpu(), torch.tensor([1.0, 3.0, 5.0])))
    back = cupy.from_dlpack(torch.arange(5, device="cuda", dtype=torch.float32) * 2)
    out["torch"]["dlpack_back"] = bool((cupy.asnumpy(back) == 2 * numpy.arange(5, dtype=numpy.float32)).all())
    if not (out["torch"]["dlpack"] and out["torch"]["dlpack_back"]):
        problems.append("CuPy and torch read each other's arrays wrongly through DLPack")
out["problems"] = problems
print(json.dumps(out))
"""


def site_check_script() -> str:
    """The `python -c` program of phase 2a (ASCII, whatever the machine's locale)."""
    return f"TEXTS = {TEXTS!a}\n" + _SITE_CHECK


def phase2a(result: dict, dry: bool, deadline: Deadline) -> None:
    """Unpack numpy 1.x and CuPy 13 into SITE, and import them as the stub will (in a dry
    run: unpack, then import this Python's numpy and torch)."""
    archive = os.path.join(CARRY, "p2", "site.tar.xz")
    if not os.path.isfile(archive):
        raise FileNotFoundError(f"no {archive}: run `python scripts/gpu_kit.py prepare` here and carry .gpu-check/p2")
    began = time.time()
    os.makedirs(SITE, exist_ok=True)
    extract(archive, SITE)
    shadowed = shadow_numpy2_modules(SITE)
    result.update(
        dry_run=dry,
        site=SITE,
        entries=sorted(os.listdir(SITE)),
        shadowed=shadowed,
        unpack_s=round(time.time() - began, 1),
    )
    env = stub_env(site=not dry)  # a dry run imports this Python's own: the site is built for the machine's
    shutil.rmtree(CUPY_CACHE, ignore_errors=True)  # compile for real, not from an earlier cache
    os.makedirs(CUPY_CACHE)
    tokenizer = os.path.join(CARRY, "p2", "repository", "preprocess", "1")
    check = run_for(
        [sys.executable, "-c", site_check_script(), SITE, "cpu" if dry else "gpu", tokenizer],
        deadline.share("2a", "imports and kernels"),
        env=env,
    )
    result["ld_library_path"] = env["LD_LIBRARY_PATH"]
    if check.returncode != 0:
        result.update(ok=False, error=f"the import check failed (exit {check.returncode}): {check.stderr[-1500:]}")
    else:
        result["imports"] = json.loads(check.stdout.strip().splitlines()[-1])
        result["ok"] = not result["imports"]["problems"]
        if result["imports"]["problems"]:
            result["error"] = "; ".join(result["imports"]["problems"])
    say(f"== phase 2a: {result.get('imports') or result.get('error')}")


def _post(url: str, body: dict, timeout: float) -> dict:
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


def _infer(http: str, texts, timeout: float = 60.0) -> dict:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": list(texts)}]}
    answer = _post(f"http://{http}/v2/models/readability/infer", body, timeout)
    return {o["name"]: [float(v) for v in o["data"]] for o in answer["outputs"]}


def _throughput(http: str, clients: int, seconds: float) -> dict:
    """`clients` closed loops of one-text KServe JSON requests (urllib: nothing to install on
    the GPU machine) on the package's one closed loop."""
    from readability_triton.measure import load

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


def _statistics(http: str, protocol: str = "http") -> dict[str, dict]:
    """{model: its statistics}, read with urllib (no tritonclient on the GPU machine); HTTP
    whatever `protocol` says (the signature `bench.settled_statistics` reads with)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{http}/v2/models/stats", timeout=30) as reply:
        return {entry["name"]: entry for entry in json.loads(reply.read()).get("model_stats", [])}


def step_costs(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """The pipeline's own cost on this machine, from Triton's statistics over one throughput
    row: per step, the compute (input + infer + output) and queue ms a request was charged,
    and the average batch; and the share of the steps' compute that is not BERT's (the goal:
    at most 10 % on a GPU)."""
    from readability_triton.measure.bench import breakdown, compute_ms

    rows = breakdown(before, after)
    compute = {model: compute_ms(row) for model, row in rows.items()}
    steps = {
        model: {
            "compute_ms": compute[model],
            "queue_ms": row.get("queue_ms_per_request") or 0.0,
            "average_batch": row.get("average_batch"),
        }
        for model, row in rows.items()
    }
    total = sum(compute.values())
    beside = (total - compute.get("bert", 0.0)) / total if total else None
    return {"steps": steps, "beside_bert_share": beside}


def log_counts(text: str) -> dict[str, int]:
    return {needle: text.count(needle) for needle in LOG_COUNTED}


#: The Python steps: KIND_CPU in the `hybrid` split (BERT and the forest stay on the GPU).
PYTHON_STEPS = ("validate", "preprocess", "featurize", "postprocess")


def _rows(server, seconds: float) -> list[dict]:
    """Throughput at 1, 8 and 32 clients, a third of `seconds` each (at most 5 s; none under
    1 s), with each step's compute."""
    from readability_triton.measure.bench import settled_statistics

    each = min(5.0, seconds / 3)
    rows = []
    for clients in (1, 8, 32) if each >= 1 else ():
        before = settled_statistics(server.http_url, "http", read=_statistics)
        row = _throughput(server.http_url, clients, each)
        row.update(step_costs(before, settled_statistics(server.http_url, "http", read=_statistics)))
        rows.append(row)
    return rows


def _stop(server, seconds: float):
    """Stop `server` (drained) within about `seconds`, at least 10; its status."""
    stop = max(10.0, seconds)
    return server.stop(timeout=stop, drain_timeout=min(20.0, stop / 3))


def hybrid(repo: str, work: str, deadline: Deadline) -> dict:
    """The same repository with the Python steps on the CPU (NumPy), BERT and the forest on
    the GPU: the `hybrid` split on the python backend, measured beside portable-gpu."""
    from readability_triton.repository import assemble as repository
    from readability_triton.repository.configs import edit_config
    from readability_triton.server.tritonserver import TritonServer

    split = os.path.join(work, "hybrid")
    shutil.copytree(repo, split)
    repository.cpu_dry_run(split, only=PYTHON_STEPS)

    def cpu_inputs(config) -> None:  # as the assembled hybrid profile: Triton copies inputs down
        if "FORCE_CPU_ONLY_INPUT_TENSORS" in config.parameters:
            del config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"]

    for model in PYTHON_STEPS:
        if os.path.isfile(os.path.join(split, model, "config.pbtxt")):
            edit_config(os.path.join(split, model, "config.pbtxt"), cpu_inputs)
    out: dict = {"profile": "portable-gpu with the Python steps KIND_CPU (the hybrid split)"}
    server = TritonServer(
        split, log_file=os.path.join(out_dir(), "server-hybrid.log"), backend_dir=os.path.join(work, "backends")
    )
    try:
        server.start(timeout=deadline.share("2", "hybrid start"))
        out["throughput"] = _rows(server, deadline.share("2", "hybrid throughput"))
    finally:
        if server.process is not None:
            out["stop_status"] = _stop(server, deadline.share("2", "hybrid stop"))
    return out


def phase2(result: dict, dry: bool, deadline: Deadline) -> None:
    """Serve the carried portable-gpu repository (KIND_CPU in a dry run) and compare its
    scores with the CPU pipeline's, then the `hybrid` split of it; fills `result`
    (serve.json) as it goes."""
    from readability_triton.repository import assemble as repository
    from readability_triton.server.tritonserver import TritonServer
    from readability_triton.stub.runtime import ARRIVALS_ENV

    result.update(dry_run=dry, profile="portable-gpu" + (" (KIND_CPU: dry run)" if dry else ""))
    p2 = os.path.join(CARRY, "p2")
    with open(os.path.join(p2, "expected.json"), encoding="utf-8") as handle:
        expected = json.load(handle)
    work = tempfile.mkdtemp(prefix="readability-kit-")
    repo = os.path.join(work, "repository")
    shutil.copytree(os.path.join(p2, "repository"), repo)
    if dry:
        repository.cpu_dry_run(repo)
    else:
        extract(os.path.join(p2, "tritonserver.tar.xz"), SITE)  # SITE leads sys.path (see gpu_kit.main)
        importlib.invalidate_caches()
    arrivals = os.path.join(work, "arrivals")
    os.makedirs(arrivals)
    os.environ[ARRIVALS_ENV] = arrivals
    log = os.path.join(out_dir(), "server.log")
    server = TritonServer(repo, log_file=log, backend_dir=os.path.join(work, "backends"))
    try:
        server.start(timeout=deadline.share("2", "server start"))
        got = _infer(server.http_url, expected["texts"], deadline.share("2", "scores"))
        diffs = {
            name: max(abs(a - b) for a, b in zip(got[name], expected[name]))
            for name in ("SCORE", "BERT_SCORE", "FOREST_SCORE")
        }
        result["max_abs_diff_vs_cpu"] = diffs
        result["scores_match"] = diffs["FOREST_SCORE"] == 0.0 and diffs["BERT_SCORE"] < 1e-4 and diffs["SCORE"] < 1e-4
        result["throughput"] = _rows(server, deadline.share("2", "throughput"))
    finally:
        if server.process is not None:
            result["stop_status"] = _stop(server, deadline.share("2", "stop"))
        want = "cpu" if dry else "gpu"
        devices = {}
        for model in ("bert", "forest", "postprocess"):
            path = os.path.join(arrivals, f"{model}.json")
            devices[model] = json.load(open(path, encoding="utf-8")) if os.path.isfile(path) else None
        result["input_devices"] = devices
        result["inputs_on_expected_device"] = all(
            d is not None
            and all(c[want] >= 1 and c["cpu" if want == "gpu" else "gpu"] == 0 for c in d["inputs"].values())
            for d in devices.values()
        )
        text = open(log, encoding="utf-8", errors="replace").read() if os.path.isfile(log) else ""
        result["log"] = log_counts(text)
    try:
        if deadline.left() < 60:
            result["hybrid"] = {"error": f"not run: {deadline.left():.0f} s of the deadline left"}
        else:
            result["hybrid"] = hybrid(repo, work, deadline)
    except Exception as exc:  # noqa: BLE001 - reported; portable-gpu's result stands
        result["hybrid"] = {"error": f"{type(exc).__name__}: {exc}"}
    failed = [
        f"the log says {needle!r} {result['log'][needle]} time(s)" for needle in LOG_PROBLEMS if result["log"][needle]
    ]
    failed += [f"the hybrid split: {result['hybrid']['error']}"] if "error" in result["hybrid"] else []
    failed += [] if result.get("scores_match") else ["the scores differ from the CPU pipeline's"]
    failed += [] if result["inputs_on_expected_device"] else [f"not every input arrived on the {want.upper()}"]
    result["ok"] = not failed
    if failed:
        result["error"] = "; ".join(failed)
    say(
        f"== phase 2: scores vs the CPU pipeline {result.get('max_abs_diff_vs_cpu')}; inputs on {want}: "
        f"{result['inputs_on_expected_device']}; log {result['log']}"
    )
    for label, rows in (
        ("portable-gpu", result.get("throughput", [])),
        ("hybrid", result["hybrid"].get("throughput", [])),
    ):
        say(f"   {label}:")
        _say_rows(rows)


def _say_rows(rows) -> None:
    for row in rows:
        say(
            f"   {row['clients']:>3} clients: {row['texts_per_s']:.1f} texts/s, p50 {row['p50_ms']} ms, "
            f"{row['errors']} errors"
        )
        if row.get("beside_bert_share") is not None:
            steps = ", ".join(
                f"{m} {c['compute_ms']:.2f} (batch {c['average_batch'] or 0:.1f})" for m, c in row["steps"].items()
            )
            say(f"       compute ms per request: {steps}; beside BERT {100 * row['beside_bert_share']:.0f} %")
