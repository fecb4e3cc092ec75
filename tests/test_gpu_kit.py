"""The GPU kit cannot rot: its dry runs (`--cpu-dry-run`: the same script, with the
modules the GPU machine lacks blocked and no GPU) run here. Call 1 (phases 0 and 1: probe,
the `gpu` tests collected as the machine would, the benchmarks) and, against the real
tritonserver, call 2 (phases 2a and 2: the stub's site unpacked and imported; the
portable-gpu repository as KIND_CPU, scores compared with the CPU pipeline, where the
inputs arrived, then its hybrid split).
Beside them, what holds each way the kit would fail on the lent machine: configs built
where tritonclient raises on import, the stub's CUDA libraries, the model.pt check, the
carry and the plan, result files on failure, the deadline, the GPU tokenizer's fallback
as a failure, and the CUDA IPC probe's buffer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
KIT = os.path.join(SCRIPTS, "gpu_kit.py")


@pytest.fixture
def kit(monkeypatch):
    """The kit's modules, imported from scripts/ as the kit imports them."""
    monkeypatch.syspath_prepend(SCRIPTS)
    import gpu_kit
    import gpu_kit_common
    import gpu_kit_prepare
    import gpu_kit_probe
    import gpu_kit_serve

    return gpu_kit, gpu_kit_common, gpu_kit_prepare, gpu_kit_probe, gpu_kit_serve


def _kit(*args, carry, out, timeout=300, site=None):
    env = dict(os.environ, READABILITY_KIT_CARRY=str(carry), OUT=str(out))
    env["READABILITY_KIT_SITE"] = str(site or os.path.join(str(out), "site"))
    return subprocess.run(
        [sys.executable, KIT, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def _stand_in_site_archive(carry) -> None:
    """A p2/site.tar.xz holding one marker module (the real one is 38 MiB of numpy and CuPy)."""
    source = carry / "site-source"
    (source / "kit_marker").mkdir(parents=True)
    (source / "kit_marker" / "__init__.py").write_text("")
    (carry / "p2").mkdir(parents=True, exist_ok=True)
    with tarfile.open(carry / "p2" / "site.tar.xz", "w:xz") as tar:
        tar.add(str(source), arcname=".")


# ---------------------------------------------------------------- 1. configs without tritonclient.grpc


@pytest.mark.slow  # a Python of its own per case (make check leaves it out)
@pytest.mark.parametrize("raising", ["tritonclient/__init__.py", "tritonclient/grpc/__init__.py"])
def test_assemble_portable_gpu_with_a_tritonclient_that_raises_on_import(tmp_path, tiny_artifacts, raising):
    """As on the GPU machine (no rapidjson): importing tritonclient raises RuntimeError; the
    configs are still built, from the generated model_config_pb2.py alone."""
    import tritonclient

    stand_in = tmp_path / "stand-in"
    (stand_in / "tritonclient" / "grpc").mkdir(parents=True)
    for name in ("tritonclient/__init__.py", "tritonclient/grpc/__init__.py"):
        (stand_in / name).write_text("" if name != raising else "raise RuntimeError('stand-in: no rapidjson')\n")
    generated = os.path.join(os.path.dirname(tritonclient.__file__), "grpc", "model_config_pb2.py")
    shutil.copyfile(generated, stand_in / "tritonclient" / "grpc" / "model_config_pb2.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stand_in), os.environ.get("PYTHONPATH", "")]))
    probe = subprocess.run([sys.executable, "-c", "import tritonclient.grpc"], capture_output=True, text=True, env=env)
    assert probe.returncode != 0 and "RuntimeError: stand-in" in probe.stderr
    out = tmp_path / "repository"
    cmd = [sys.executable, "-m", "readability_triton.cli", "assemble", "--profile", "portable-gpu"]
    result = subprocess.run(
        [*cmd, "--artifacts", tiny_artifacts, "--out", str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" in (out / "postprocess" / "config.pbtxt").read_text()
    assert "KIND_GPU" in (out / "bert" / "config.pbtxt").read_text()


def test_the_carried_tritonclient_and_protobuf_must_match(kit, tmp_path):
    import google.protobuf
    import tritonclient

    prepare = kit[2]
    installed = tmp_path / "installed"  # the pair the tests run with, laid out as p01/site
    (installed / "google").mkdir(parents=True)
    (installed / "tritonclient").symlink_to(os.path.dirname(tritonclient.__file__))
    (installed / "google" / "protobuf").symlink_to(os.path.dirname(google.protobuf.__file__))
    assert prepare.proto_pair_problem(str(installed)) is None
    site = tmp_path / "site"
    (site / "tritonclient" / "grpc").mkdir(parents=True)
    (site / "google" / "protobuf").mkdir(parents=True)
    (site / "tritonclient" / "grpc" / "model_config_pb2.py").write_text("# Protobuf Python Version: 6.33.5\n")
    for runtime, refused in (("5.29.3", True), ("6.31.1", True), ("6.33.5", False), ("6.34.0", False)):
        (site / "google" / "protobuf" / "__init__.py").write_text(f"__version__ = '{runtime}'\n")
        problem = prepare.proto_pair_problem(str(site))
        assert (problem is not None) == refused, (runtime, problem)
        assert not refused or "6.33.5" in problem


# ---------------------------------------------------------------- 2. NVRTC for the stub, 2a's imports


def test_the_stub_gets_the_nvrtc_and_cuda_runtime_folders(kit, tmp_path):
    serve = kit[4]
    wheels = tmp_path / "site-packages" / "nvidia"
    for folder, library in (("cu13", "libnvrtc.so.13"), ("cu13", "libcudart.so.13"), ("cublas", "libcublas.so.13")):
        (wheels / folder / "lib").mkdir(parents=True, exist_ok=True)
        (wheels / folder / "lib" / library).write_text("")
    found = serve.cuda_library_dirs([str(tmp_path / "site-packages")])
    assert found == [str((wheels / "cu13" / "lib").resolve())]
    env = serve.stub_env({"LD_LIBRARY_PATH": "/opt/elsewhere", "PYTHONPATH": "/x"}, [str(tmp_path / "site-packages")])
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [found[0], "/opt/elsewhere"]
    assert env["PYTHONPATH"].split(os.pathsep) == [serve.SITE, ROOT, "/x"]


def test_the_site_shadows_the_machines_numpy2_scipy(kit, tmp_path):
    """With the site first on the path, `import scipy` is an ImportError that says why,
    which CuPy 13's `try: import scipy.sparse ... except ImportError` allows for (the
    machine's scipy, built for numpy 2, failed `import cupy` with an AttributeError)."""
    serve = kit[4]
    assert serve.shadow_numpy2_modules(str(tmp_path)) == ["scipy"]
    probe = (
        "try:\n    import scipy.sparse\nexcept ImportError as exc:\n    print('ImportError:', exc)\n"
        "else:\n    print('imported', scipy.__file__)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ImportError: scipy of the GPU machine is built for numpy 2"), done.stdout


@pytest.mark.integration
def test_phase_2a_dry_run_unpacks_and_imports_the_site(tmp_path):
    _stand_in_site_archive(tmp_path / "carry")
    result = _kit("run", "--phase", "2a", "--cpu-dry-run", carry=tmp_path / "carry", out=tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "phase2a.json").read_text())
    assert record["ok"] and "kit_marker" in record["entries"] and record["shadowed"] == ["scipy"]
    imports = record["imports"]
    assert imports["numpy"]["version"].startswith("1.") and imports["torch"]["version"] and not imports["problems"]


# ---------------------------------------------------------------- 3. model.pt, written here, read there


def _traced(path) -> None:
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding, self.head = torch.nn.Embedding(2000, 4), torch.nn.Linear(4, 1)

        def forward(self, ids, mask):
            return self.head((self.embedding(ids) * mask.unsqueeze(-1)).sum(1))

    ids = torch.ones((2, 16), dtype=torch.int64)
    torch.jit.save(torch.jit.trace(Tiny(), (ids, torch.ones_like(ids))), str(path))


def _with_format(path, version: int) -> None:
    with zipfile.ZipFile(path) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for info, data in entries:
            target.writestr(info, f"{version}\n".encode() if info.filename.endswith("/version") else data)


@pytest.mark.slow  # runs torch in a Python of its own (make check leaves it out)
def test_phase_0_says_which_torch_wrote_model_pt_and_whether_this_one_runs_it(kit, tmp_path):
    import torch

    _, common, prepare, probe, _ = kit
    p01 = tmp_path / "p01"
    (p01 / "tiny-artifacts").mkdir(parents=True)
    model = p01 / "tiny-artifacts" / "model.pt"
    _traced(model)
    (p01 / "kit.json").write_text(json.dumps({"model_pt": prepare.model_pt_record(str(model))}))
    report = probe.model_pt_check(str(p01), dict(os.environ), 120, dry=True)
    assert report["ok"] and report["max_abs_diff"] == 0.0, report
    assert report["written_by"].startswith(f"torch {torch.__version__} (TorchScript file format ")
    _with_format(model, common.MACHINE_TORCHSCRIPT_FORMAT + 1)  # what a newer torch than the machine's writes
    with pytest.raises(SystemExit, match="TorchScript file format 11; the lent machine's torch reads up to 10"):
        prepare.model_pt_record(str(model))
    report = probe.model_pt_check(str(p01), dict(os.environ), 120, dry=True)
    assert report["ok"] is False and "file format 11" in report["why"] and "no newer than" in report["why"]


@pytest.mark.slow  # runs torch in a Python of its own (make check leaves it out)
def test_the_kits_bert_is_a_model_pt_the_machines_torch_reads(kit, tiny_artifacts):
    _, common, prepare, _, _ = kit
    record = prepare.model_pt_record(os.path.join(tiny_artifacts, "model.pt"))
    assert record["file_format"] <= common.MACHINE_TORCHSCRIPT_FORMAT and len(record["outputs"]) == 2


# ---------------------------------------------------------------- 4. the carry, one call for 0, 1 and 2a


def test_the_server_carries_no_other_pythons_libpython(kit):
    ignore = kit[2].foreign_libpython("3.12")
    names = ["libpython3-419a3a08.13.so.1.0", "libpython3.11.so.1.0", "libpython3-0a1b2c3d.12.so.1.0"]
    names += ["libtritonserver-717102f0.so", "libicudata-c1404396.so.70.1"]
    assert ignore("libs", names) == {"libpython3-419a3a08.13.so.1.0", "libpython3.11.so.1.0"}


def test_two_self_contained_calls_within_the_limits(kit, tmp_path):
    common = kit[1]
    assert [call.phases for call in common.CALLS] == [("0", "1"), ("2a", "2")]
    assert [call.carries for call in common.CALLS] == [("p01",), ("p2",)]
    (tmp_path / "p01").mkdir()
    (tmp_path / "p01" / "a").write_bytes(bytes(2**20))
    line, total = common.describe_call(common.CALLS[0], 1, str(tmp_path))
    assert total == 2**20 + common.checkout_bytes() and total < common.CALL_CARRY_BYTES
    assert line.startswith("call 1: phases 0,1; deadline 540 s") and "p01 1.0 + checkout" in line
    assert common.describe_call(common.CALLS[1], 2, str(tmp_path))[1] is None  # p2 not prepared
    (tmp_path / "p2").mkdir()
    (tmp_path / "p2" / "site.tar.xz").write_bytes(bytes(3 * 2**20))
    line, total = common.describe_call(common.CALLS[1], 2, str(tmp_path))
    assert line.startswith("call 2: phases 2a,2; deadline 540 s") and "p2 3.0 + checkout" in line


def test_phase_2a_s_program_parses_and_is_ascii(kit):
    import ast

    script = kit[4].site_check_script()
    assert script.isascii()
    ast.parse(script)
    assert kit[4].stub_env({})["CUPY_CACHE_DIR"] == kit[4].CUPY_CACHE  # 2a's compiled kernels, reused by 2


def test_the_site_leaves_out_thrust_and_tests_only(kit):
    left_out = kit[2].SITE_LEFT_OUT

    def out(path):
        return any(p.search(path) for p in left_out)

    assert out("./cupy/cuda/thrust.cpython-312-x86_64-linux-gnu.so") and out("./numpy/core/tests/")
    assert not any(
        out(p) for p in ("./cupy/cuda/cub.cpython-312-x86_64-linux-gnu.so", "./numpy/testing/", "./cupy/testing/")
    )


def test_the_empty_icu_data_library_keeps_its_name_and_symbol(kit, tmp_path):
    import glob

    libs = os.path.join(os.path.dirname(os.path.dirname(kit[2]._origin("pytriton"))), "nvidia_pytriton.libs")
    real = glob.glob(os.path.join(libs, "libicudata*.so*"))
    if not real or shutil.which("cc") is None:
        pytest.skip("no pytriton ICU library or no C compiler here")
    copy = tmp_path / "libs"
    copy.mkdir()
    shutil.copy(real[0], copy)
    name = kit[2].empty_icu_data(str(copy))
    assert name == os.path.basename(real[0]) and os.path.getsize(copy / name) < 100_000
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(copy / name)], capture_output=True, text=True).stdout
    soname = subprocess.run(["readelf", "-d", str(copy / name)], capture_output=True, text=True).stdout
    assert "icudt" in symbols and f"[{name}]" in soname


# ---------------------------------------------------------------- 5. every phase writes its result


@pytest.mark.integration
def test_every_phase_writes_its_result_with_the_error_when_it_fails(tmp_path):
    carry, out = tmp_path / "carry", tmp_path / "out"
    on_the_gpu_path = _kit("run", "--phase", "0,2", carry=carry, out=out)  # here: no CuPy, no site
    dry = _kit("run", "--phase", "1,2a,2", "--cpu-dry-run", "--deadline", "3", carry=carry, out=out)
    assert on_the_gpu_path.returncode == 1 and dry.returncode == 1
    errors = {}
    for phase, name in (("0", "probe.json"), ("1", "phase1.json"), ("2a", "phase2a.json"), ("2", "serve.json")):
        record = json.loads((out / name).read_text())
        assert record["ok"] is False, (phase, record)
        errors[phase] = record["error"]
    assert "cupy_ipc: no CuPy" in errors["0"] and "model_pt: no " in errors["0"]
    assert "exit 124 (124: out of time" in errors["1"]
    assert "FileNotFoundError" in errors["2a"] and "site.tar.xz" in errors["2a"]
    assert "FileNotFoundError" in errors["2"] and "expected.json" in errors["2"]


@pytest.mark.integration
def test_phase_2_without_2a_says_to_run_them_together(tmp_path):
    result = _kit("run", "--phase", "2", carry=tmp_path / "carry", out=tmp_path / "out", site=tmp_path / "gone")
    assert result.returncode == 1
    assert "run phases 2a,2 together" in json.loads((tmp_path / "out" / "serve.json").read_text())["error"]


# ---------------------------------------------------------------- 6. one deadline per call


def test_each_calls_steps_fit_its_deadline_inside_a_device_call(kit):
    common = kit[1]
    for call in common.CALLS:
        assert call.steps_seconds <= common.DEADLINE_S < common.CALL_SECONDS, call
    assert set(common.STEPS) == set(common.RESULT_FILES)


def test_the_deadline_is_shared_out(kit, monkeypatch):
    common = kit[1]
    now = [1000.0]
    deadline = common.Deadline.after(100, clock=lambda: now[0])
    assert deadline.share("1", "gpu tests") == 100  # its share is 200: what is left
    assert deadline.share("0", "versions") == 45
    now[0] += 90
    assert deadline.share("0", "versions") == 10
    now[0] += 20
    assert deadline.left() == 0 and common.run_for(["true"], deadline.share("0", "versions")).returncode == 124
    monkeypatch.setenv(common.Deadline.ENV, str(time.time() + 50))  # a child process of the same call
    assert 45 < common.Deadline.from_environment(540).left() <= 50
    began = time.monotonic()
    assert common.run_for(["sleep", "10"], 1).returncode == 124 and time.monotonic() - began < 5


# ---------------------------------------------------------------- 7. the GPU tokenizer's fallback fails


def test_the_gpu_tokenizers_fallback_fails_the_kit(kit, vocab_dir):
    from tokenizers import pre_tokenizers

    from readability_triton.tokenizer import wordpiece
    from readability_triton.tokenizer.runner import TokenizerRunner

    gpu_kit, _, _, _, serve = kit
    assert serve.REQUIRE_GPU_TOKENIZER == wordpiece.REQUIRE_GPU_ENV
    assert gpu_kit.kit_env(dry=False)[serve.REQUIRE_GPU_TOKENIZER] == "1"  # phase 1: the tests and benchmarks
    assert serve.stub_env({})[serve.REQUIRE_GPU_TOKENIZER] == "1"  # phase 2: the server's stubs
    tokenizer = wordpiece.WordPieceTokenizer.from_directory(vocab_dir, 16)
    tokenizer.backend.pre_tokenizer = pre_tokenizers.Whitespace()  # falls back on any machine
    line = TokenizerRunner(tokenizer, "gpu").describe()  # what a GPU preprocess instance logs then
    counts = serve.log_counts(f"I1202 12:00:00 model.py:23] {line}\n")
    assert [needle for needle in serve.LOG_PROBLEMS if counts[needle]] == ["tokenizes on the CPU"]


# ---------------------------------------------------------------- 8. the CUDA IPC probe's buffer

#: cupy.cuda.runtime as the probe uses it, over files: device memory shared by processes,
#: and an IPC handle that names a whole allocation (as CUDA's does), never an offset in it.
_STAND_IN_RUNTIME = """
import ctypes, os
_DIR = os.environ["STAND_IN_DEVICE"]
memcpyHostToDevice, memcpyDeviceToHost = 1, 2
def _allocations():
    return sorted(int(name) for name in os.listdir(_DIR))
def _at(pointer):
    base = max(a for a in _allocations() if a <= pointer)
    return os.path.join(_DIR, str(base)), pointer - base
def malloc(size):
    pointer = (1 << 40) + len(_allocations()) * (1 << 32)
    open(os.path.join(_DIR, str(pointer)), "wb").write(bytes(size))
    return pointer
def free(pointer):
    os.remove(os.path.join(_DIR, str(pointer)))
def memcpy(dst, src, size, kind):
    path, offset = _at(dst if kind == memcpyHostToDevice else src)
    with open(path, "r+b") as memory:
        memory.seek(offset)
        if kind == memcpyHostToDevice:
            memory.write(ctypes.string_at(src, size))
        else:
            ctypes.memmove(dst, memory.read(size), size)
def ipcGetMemHandle(pointer):
    return int(os.path.basename(_at(pointer)[0])).to_bytes(64, "little")
def ipcOpenMemHandle(handle, flags=1):
    return int.from_bytes(handle, "little")
def ipcCloseMemHandle(pointer):
    pass
"""


def test_the_cuda_ipc_probe_shares_a_buffer_of_its_own(tmp_path):
    stand_in = tmp_path / "stand-in"
    (stand_in / "cupy" / "cuda").mkdir(parents=True)
    (stand_in / "cupy" / "__init__.py").write_text("")
    (stand_in / "cupy" / "cuda" / "__init__.py").write_text("")
    (stand_in / "cupy" / "cuda" / "runtime.py").write_text(_STAND_IN_RUNTIME)
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / str(1 << 40)).write_bytes(bytes(4096))  # not the process's first allocation
    env = dict(os.environ, STAND_IN_DEVICE=str(tmp_path / "device"))
    env["PYTHONPATH"] = os.pathsep.join([str(stand_in), SCRIPTS, os.environ.get("PYTHONPATH", "")])
    code = "import json, os, gpu_kit_probe; print(json.dumps(gpu_kit_probe.cupy_ipc_check(dict(os.environ), 60)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["sum"] == report["want"] == float(sum(range(1 << 20))), report
    assert os.listdir(tmp_path / "device") == [str(1 << 40)]  # its buffer freed


# ---------------------------------------------------------------- the dry runs of the two calls


@pytest.mark.integration
def test_call_1_dry_run(tmp_path):
    result = _kit("run", "--phase", "0,1", "--cpu-dry-run", carry=tmp_path / "carry", out=tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "== call 1: phases 0,1; deadline 540 s" in result.stdout
    probe = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert probe["dry_run"] and {"gpu", "libpython", "libcuda", "packages", "dev_shm_mib", "cupy_ipc"} <= set(probe)
    assert probe["packages"]["treelite"].startswith("missing")  # blocked: the GPU machine has none
    phase1 = json.loads((tmp_path / "out" / "phase1.json").read_text())
    assert phase1["ok"] and phase1["tests"]["exit"] == 0
    assert "tests/test_tokenizer_array.py" in phase1["tests"]["files"] and "skipped" in phase1["tests"]["summary"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "featurize batch" in summary and "served step NumPy" in summary and "cpu (tokenizers)" in summary


@pytest.mark.integration
def test_call_2_dry_run_serves_the_gpu_profile_and_its_hybrid_split_on_the_cpu(tmp_path):
    prepared = _kit("prepare", "--only", "p2", "--no-server", carry=tmp_path / "carry", out=tmp_path / "out")
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    _stand_in_site_archive(tmp_path / "carry")
    result = _kit("run", "--phase", "2a,2", "--cpu-dry-run", carry=tmp_path / "carry", out=tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    call = next(line for line in result.stdout.splitlines() if line.startswith("== call 2: phases 2a,2"))
    assert "deadline 540 s" in call and "MiB of 64 MiB" in call, call  # one call: its carry and deadline
    phase2a = json.loads((tmp_path / "out" / "phase2a.json").read_text())
    assert phase2a["ok"] and "kit_marker" in phase2a["entries"]
    serve = json.loads((tmp_path / "out" / "serve.json").read_text())
    hybrid = serve["hybrid"]
    assert "error" not in hybrid and [row["errors"] for row in hybrid["throughput"]] == [0, 0, 0], hybrid
    assert serve["ok"] and serve["scores_match"] and serve["inputs_on_expected_device"]
    assert serve["log"]["not healthy"] == 0 and serve["log"]["tokenizes on the CPU"] == 0
    assert serve["max_abs_diff_vs_cpu"]["FOREST_SCORE"] == 0.0
    assert [row["errors"] for row in serve["throughput"]] == [0, 0, 0]
    # the pipeline's own cost: every step's compute per request, and the share beside BERT
    for row in serve["throughput"]:
        assert set(row["steps"]) == {"featurize", "forest", "preprocess", "bert", "postprocess"}, row
        assert all(step["compute_ms"] > 0 for step in row["steps"].values()), row
        assert 0 < row["beside_bert_share"] < 1
