"""What differs between Triton releases (`triton.releases`): the pins of the image, the
check that fails a build whose numpy the stub cannot take, and the configs `assemble
--triton-version` renders for 24.10 and 25.09+, all parsed with Triton's own proto."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from readability_triton import contracts as C
from readability_triton.errors import AssemblyError
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs, profiles, releases
from readability_triton.repository.options import AssemblyOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = profiles.PROFILES


def test_release_rules():
    old, numpy2, cuda13, renamed = (releases.release(v) for v in ("24.10", "24.11", "25.08", "25.09"))
    assert (old.python, old.ubuntu, old.cuda_major) == ("3.10", "22.04", 12)
    assert old.numpy.endswith("<2") and old.cupy == "cupy-cuda12x>=13,<14"  # CuPy 14 needs numpy 2
    assert not numpy2.numpy.endswith("<2") and numpy2.python == "3.10"
    assert releases.release("24.12").python == "3.12"
    assert cuda13.cupy.startswith("cupy-cuda13x") and cuda13.cudf.startswith("cudf-cu13")
    assert releases.release("25.04").cupy.startswith("cupy-cuda12x")
    assert not cuda13.fil_is_classifier and renamed.fil_is_classifier
    assert old.image == "nvcr.io/nvidia/tritonserver:24.10-py3"


@pytest.mark.parametrize("bad", ["23.12", "24.13", "2410", "24.1", "latest", ""])
def test_unknown_releases_are_refused(bad):
    with pytest.raises(releases.ReleaseError, match="24.10"):
        releases.release(bad)


@pytest.mark.parametrize("version", [row[0] for row in releases.TABLE])
def test_only_the_gpu_profile_installs_cuda_wheels(version):
    r = releases.release(version)
    for profile in ("cpu", "hybrid", "portable"):
        wanted = r.requirements(profile) + r.optional(profile)
        assert not [w for w in wanted if "cupy" in w or "cudf" in w or "cu1" in w], (profile, wanted)
    gpu = r.requirements("gpu") + r.optional("gpu")
    assert any(w.startswith(f"cupy-cuda{r.cuda_major}x") for w in gpu)
    assert any(w.startswith(f"cudf-cu{r.cuda_major}") for w in gpu)
    assert r.extras("portable") == "serve,portable,client" and r.extras("gpu") == "serve,native,client"
    assert "torch" not in " ".join(r.constraints("portable") + r.constraints("cpu") + r.constraints("gpu"))
    assert any(c.startswith("onnxruntime") for c in r.constraints("portable"))


def test_the_build_check_refuses_what_the_stub_cannot_take():
    old, new = releases.release("24.10"), releases.release("26.08")
    assert releases.problems(old, "gpu", "3.10", "1.26.4", "cupy-cuda12x") == []
    assert releases.problems(old, "cpu", "3.10", "1.26.4", None) == []
    (problem,) = releases.problems(old, "cpu", "3.10", "2.1.0", None)
    assert "numpy 2.1.0" in problem and "numpy>=1.24,<2" in problem
    assert releases.problems(new, "cpu", "3.12", "2.3.0", None) == []
    (problem,) = releases.problems(new, "gpu", "3.12", "2.3.0", "cupy-cuda12x")
    assert "CUDA 13" in problem and "cupy-cuda13x" in problem
    (problem,) = releases.problems(new, "gpu", "3.12", "2.3.0", None)
    assert "CuPy" in problem
    assert releases.problems(old, "cpu", "3.10", None, None) == ["numpy is not installed"]


def test_the_build_check_reads_the_stub_in_the_image(tmp_path):
    """What matters is the stub the image holds and the libpython it links, not a table:
    the stand-in base pairs Triton 2.51 with Python 3.11."""
    old = releases.release("24.10")
    assert releases.problems(old, "cpu", "3.11", "1.26.4", None, ("3.11", True)) == []
    (problem,) = releases.problems(old, "cpu", "3.12", "1.26.4", None, ("3.11", True))
    assert "links libpython3.11" in problem and "3.12" in problem
    (problem,) = releases.problems(old, "cpu", "3.11", "1.26.4", None, ("3.11", False))
    assert "does not find" in problem
    (problem,) = releases.problems(old, "cpu", "3.11", "1.26.4", None, (None, False), "/nowhere/stub")
    assert "/nowhere/stub" in problem and "BASE_IMAGE" in problem
    assert releases.stub_libpython(str(tmp_path / "missing")) == (None, False)
    from readability_triton.server.installation import triton_home

    version = "%d.%d" % sys.version_info[:2]
    real = os.path.join(triton_home(), "python_backend_stubs", version, "triton_python_backend_stub")
    assert releases.stub_libpython(real)[0] == version  # the wheel's stub for this Python links its libpython


def _module(*args, cwd=ROOT):
    # -S: no site-packages, so the module runs as the Dockerfile runs it, before any install.
    return subprocess.run(
        [sys.executable, "-S", "-m", "readability_triton.repository.releases", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("version", ["24.10", "26.08"])
def test_what_the_dockerfile_asks_runs_on_the_standard_library_alone(version, profile):
    r = releases.release(version)
    got = {
        what: _module(what, "--triton-version", version, "--profile", profile)
        for what in ("numpy", "requirements", "optional", "extras")
    }
    assert all(p.returncode == 0 for p in got.values()), {k: p.stderr for k, p in got.items()}
    assert got["numpy"].stdout.split() == [r.numpy]
    assert got["requirements"].stdout.split() == r.requirements(profile)
    assert got["optional"].stdout.split() == r.optional(profile)
    assert got["extras"].stdout.strip() == r.extras(profile)


def test_the_module_refuses_with_a_message():
    result = _module("requirements", "--triton-version", "22.01")
    assert result.returncode == 2 and "oldest release supported is 24.10" in result.stderr
    result = _module("check", "--triton-version", "24.10", "--profile", "cpu", "--stub", "/nowhere/stub")
    assert result.returncode == 1 and "no python-backend stub linking a libpython at /nowhere/stub" in result.stderr


def test_the_readme_table_is_the_one_the_rules_give():
    with open(os.path.join(ROOT, "docs", "releases.md"), encoding="utf-8") as handle:
        assert releases.markdown_table() in handle.read()


# ------------------------------------------------------------------- configs


@pytest.mark.parametrize("version", ["24.10", "25.08", "25.09", "26.08"])
@pytest.mark.parametrize("profile", PROFILES)
def test_configs_for_each_release_parse_with_tritons_proto(tmp_path, profile, version):
    repository.write_configs(str(tmp_path), AssemblyOptions(profile, triton_version=version))
    models = configs.repository_models(version)
    assert sorted(os.listdir(tmp_path)) == sorted(models)  # the wiring's models, no other
    assert (C.VALIDATE in models) == releases.release(version).parallel_ensemble
    for model in models:
        config = configs.read_config(str(tmp_path / model / "config.pbtxt"))
        assert config.name == model
        if config.backend == "fil":
            params = {k: v.string_value for k, v in config.parameters.items()}
            assert params["model_type"] == "treelite_checkpoint"
            new = releases.release(version).fil_is_classifier
            assert params.get("is_classifier" if new else "output_class") == "false"
            assert ("output_class" if new else "is_classifier") not in params


def test_only_the_forest_config_differs_between_releases():
    for profile in PROFILES:
        for model in configs.repository_models("24.10"):
            old, new = (
                configs.model_config(model, AssemblyOptions(profile, triton_version=v)) for v in ("24.10", "25.09")
            )
            if profiles.placement(model, profile).backend == "fil":
                assert old != new
                old.parameters["is_classifier"].CopyFrom(old.parameters.pop("output_class"))
                # FIL's CPU switch (24.10's FIL; the rewritten FIL of 25.09 has none)
                assert old.parameters.pop("use_experimental_optimizations").string_value == "true"
            assert old == new, (profile, model)


def test_assemble_for_a_release(tiny_artifacts, tmp_path):
    out = tmp_path / "repo"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "readability_triton.cli",
            "assemble",
            "--profile",
            "cpu",
            "--artifacts",
            tiny_artifacts,
            "--out",
            str(out),
            "--triton-version",
            "26.08",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "for Triton 26.08" in result.stdout
    forest = (out / C.FOREST / "config.pbtxt").read_text()
    assert '"is_classifier"' in forest and "output_class" not in forest
    assert "for Triton 26.08" in (out / C.BERT / "config.pbtxt").read_text()
    # 26.02+ runs the branches in parallel behind a validate step (contracts.PARALLEL_STEPS)
    assert (out / C.VALIDATE / "config.pbtxt").is_file()
    assert "MAX_PENDING_REQUESTS" in (out / C.VALIDATE / "config.pbtxt").read_text()
    assert "MAX_PENDING_REQUESTS" not in (out / C.FEATURIZE / "config.pbtxt").read_text()
    with pytest.raises(AssemblyError, match="oldest release supported"):
        repository.assemble(tiny_artifacts, str(tmp_path / "old"), AssemblyOptions("cpu", triton_version="23.05"))


def test_setup_cfg_gpu_extras_hold_the_releases_pins():
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    extras = {
        name: {line.strip() for line in value.splitlines() if line.strip()}
        for name, value in config["options.extras_require"].items()
    }
    for version in ("24.10", "26.08"):
        r = releases.release(version)
        assert set(r.requirements("gpu")[1:] + r.optional("gpu")) <= extras[r.gpu_extra], version
        if not r.stub_numpy2:
            assert r.numpy in extras[r.gpu_extra]
