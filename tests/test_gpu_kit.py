"""The GPU kit cannot rot: its dry runs (`--cpu-dry-run`: the same script, with the
modules the GPU machine lacks blocked and no GPU) run here. Phases 0 and 1 (probe, the
`gpu` tests collected as the machine would, the benchmarks) and, against the real
tritonserver, phase 2 (the portable-gpu repository as KIND_CPU, scores compared with the
CPU pipeline, where the inputs arrived)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIT = os.path.join(ROOT, "scripts", "gpu_kit.py")


def _kit(*args, carry, out, timeout=300):
    env = dict(os.environ, READABILITY_KIT_CARRY=str(carry), OUT=str(out))
    return subprocess.run(
        [sys.executable, KIT, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


@pytest.mark.integration
def test_phases_0_and_1_dry_run(tmp_path):
    result = _kit("run", "--phase", "0,1", "--cpu-dry-run", carry=tmp_path / "carry", out=tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    probe = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert probe["dry_run"] and {"gpu", "libpython", "libcuda", "packages", "dev_shm_mib", "cupy_ipc"} <= set(probe)
    assert probe["packages"]["treelite"].startswith("missing")  # blocked: the GPU machine has none
    phase1 = json.loads((tmp_path / "out" / "phase1.json").read_text())
    assert phase1["ok"] and phase1["tests"]["exit"] == 0
    assert "tests/test_tokenizer_array.py" in phase1["tests"]["files"] and "skipped" in phase1["tests"]["summary"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "featurize batch" in summary and "array engine (NumPy twin)" in summary


@pytest.mark.integration
def test_phase_2_dry_run_serves_the_gpu_profile_on_the_cpu(tmp_path):
    prepared = _kit("prepare", "--only", "p2b", "--no-server", carry=tmp_path / "carry", out=tmp_path / "out")
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    result = _kit("run", "--phase", "2", "--cpu-dry-run", carry=tmp_path / "carry", out=tmp_path / "out")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    serve = json.loads((tmp_path / "out" / "serve.json").read_text())
    assert serve["scores_match"] and serve["inputs_on_expected_device"] and serve["log"]["not healthy"] == 0
    assert serve["max_abs_diff_vs_cpu"]["FOREST_SCORE"] == 0.0
    assert [row["errors"] for row in serve["throughput"]] == [0, 0, 0]
