"""What differs between Triton releases, for the configs `assemble` renders and for the
image the Dockerfile builds. Standard library only: the Dockerfile runs this module from
the source tree before anything is installed.

    python -m readability_triton.repository.releases requirements --triton-version 26.08 --profile gpu
    python -m readability_triton.repository.releases check --triton-version 24.10 --profile gpu
    python -m readability_triton.repository.releases table

Facts (NVIDIA's release notes and this project's checks; docs/releases.md has them with
their sources, and the upstream bugs this project works around):
- 24.10 (Triton 2.51, the core the tests run): Ubuntu 22.04, Python 3.10, CUDA 12.6; its
  python-backend stub is built with pybind11 2.10 and crashes on BYTES inputs with numpy 2
  (reproduced here), so numpy < 2 and CuPy 13.x (CuPy 14 requires numpy 2).
- 24.11: the stub takes numpy 2. 24.12: Ubuntu 24.04 and Python 3.12.
- 25.08: CUDA 13.0 (release notes: "based on CUDA 13.0.0"); 25.10: 13.0.2. CuPy and cuDF
  wheels must match the image's CUDA major: cupy-cuda12x/cudf-cu12 before, cupy-cuda13x/
  cudf-cu13 from then on.
- 26.02 (core#466): an ensemble whose step fails while another step of the same request is
  in flight waits for that step before it answers and releases the request; before, the
  request stayed in flight for good (see the rules at `contracts.PARALLEL_STEPS`). So the
  ensemble's branches run in parallel from 26.02 and one after the other before.
- 25.09: the FIL backend renamed its config keys (`output_class` -> `is_classifier`,
  `algo` -> `layout`, `threads_per_tree` -> `chunk_size`); the old ones warn, then go.
  Of these the configs here set only the first.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

from ..errors import ReleaseError
from .profiles import PROFILE

#: The release whose core the test suite runs (the pytriton wheel's tritonserver 2.51).
TESTED = "24.10"
#: The oldest release the configs and the image are written for.
OLDEST = "24.10"

_VERSION = re.compile(r"^(\d{2})\.(\d{2})$")


def parse(version: str) -> tuple[int, int]:
    match = _VERSION.match(version.strip())
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ReleaseError(f"Triton release {version!r}: give the container tag's YY.MM, e.g. 24.10 or 26.08")
    parsed = (int(match.group(1)), int(match.group(2)))
    if parsed < parse_known(OLDEST):
        raise ReleaseError(
            f"Triton release {version}: the oldest release supported is {OLDEST} "
            f"(Treelite 4 checkpoints in FIL, the python backend's BYTES handling)"
        )
    return parsed


def parse_known(version: str) -> tuple[int, int]:
    year, month = version.split(".")
    return int(year), int(month)


@dataclass(frozen=True)
class Release:
    """One Triton release, as far as this project depends on it."""

    version: str
    python: str
    ubuntu: str
    cuda_major: int
    stub_numpy2: bool  # the python-backend stub accepts numpy 2
    fil_is_classifier: bool  # FIL reads `is_classifier` (25.09+), else `output_class`
    parallel_ensemble: bool  # a failed step no longer strands its request (core#466, 26.02+)

    @property
    def image(self) -> str:
        return f"nvcr.io/nvidia/tritonserver:{self.version}-py3"

    @property
    def numpy(self) -> str:
        return "numpy>=1.24" if self.stub_numpy2 else "numpy>=1.24,<2"

    @property
    def cupy(self) -> str:
        if self.cuda_major >= 13:
            return "cupy-cuda13x>=13.6"
        return "cupy-cuda12x>=13" if self.stub_numpy2 else "cupy-cuda12x>=13,<14"

    @property
    def cudf(self) -> str:
        # WordPieceVocabulary arrived in cuDF 25.04; cu13 wheels from 25.10.
        return "cudf-cu13>=25.10" if self.cuda_major >= 13 else "cudf-cu12>=25.04"

    def requirements(self, profile: str) -> list[str]:
        """pip requirements for the image's python3, besides the package's extras: numpy the
        stub can take, and for the profiles with Python steps on the GPU CuPy for the image's
        CUDA. cuDF is installed separately and may be missing (see `optional`)."""
        reqs = [self.numpy]
        if PROFILE[profile].cupy:
            reqs.append(self.cupy)
        return reqs

    def optional(self, profile: str) -> list[str]:
        """What the image installs if pip has it for this Python (WordPiece on the GPU)."""
        return [self.cudf] if PROFILE[profile].cupy else []

    def extras(self, profile: str) -> str:
        """The package's extras for `profile` in this image: what its Python models run, and
        the client `serve`'s health check uses. The native profiles (gpu, hybrid, cpu) run
        BERT and the forest in Triton's own backends: no Treelite or torch; their `assemble`
        writes the ragged BERT graph with onnx and checks its packed form with ONNX Runtime
        (`native`)."""
        where = PROFILE[profile]
        return (
            "serve,"
            + ("portable," if where.portable else "native,")
            + ("torchscript," if where.torch else "")
            + "client"
        )

    def constraints(self, profile: str) -> list[str]:
        """The pins the image installs `profile` under (a pip constraints file): every heavy
        dependency bounded to the versions this project runs (numpy for the stub; ONNX
        Runtime 1.18+ reads the exported opset-18, IR-10 model; Treelite 4.x reads the
        checkpoints FIL reads; torch for the image's CUDA comes from PIP_EXTRA_INDEX_URL)."""
        pins = [self.numpy, "tokenizers>=0.19,<1", "tritonclient>=2.41,<3", "protobuf>=4,<7"]
        if PROFILE[profile].portable:
            pins += ["onnxruntime>=1.18,<2", "treelite>=4,<5"]
        else:  # assemble writes the ragged BERT graph with onnx, checks it with ONNX Runtime (`native`)
            pins += ["onnx>=1.16,<2", "onnxruntime>=1.18,<2"]
        if PROFILE[profile].torch:
            pins.append("torch>=2.5,<3")
        return pins + self.requirements(profile)[1:]

    @property
    def gpu_extra(self) -> str:
        """setup.cfg's extra with this release's CuPy and cuDF (`pip install
        'readability-triton[serve,<this>]'` into a server of this release)."""
        return "gpu-cu13" if self.cuda_major >= 13 else "gpu"

    def fil_parameters(self) -> dict[str, str]:
        """FIL's parameters for a Treelite regressor, in the keys this release reads. Up to
        25.08, `use_experimental_optimizations` (CPU only; the same predictions): FIL's own
        CPU inference instead of Treelite's GTIL, measured faster at every batch size
        (benchmarks/bench_forest.py, docs/performance.md). 25.09's rewritten FIL has no
        such switch."""
        if self.fil_is_classifier:
            return {"model_type": "treelite_checkpoint", "is_classifier": "false"}
        return {"model_type": "treelite_checkpoint", "output_class": "false", "use_experimental_optimizations": "true"}


def release(version: str = TESTED) -> Release:
    """What this project knows of Triton release `version` (YY.MM, 24.10 or later)."""
    v = parse(version)
    return Release(
        version=f"{v[0]:02d}.{v[1]:02d}",
        python="3.12" if v >= (24, 12) else "3.10",
        ubuntu="24.04" if v >= (24, 12) else "22.04",
        cuda_major=13 if v >= (25, 8) else 12,
        stub_numpy2=v >= (24, 11),
        fil_is_classifier=v >= (25, 9),
        parallel_ensemble=v >= (26, 2),
    )


#: The README's compatibility table: known versions only ("" where not checked).
TABLE = (
    # release, Python, CUDA, libtorch, ONNX Runtime, FIL's Treelite, notes
    ("24.10", "3.10", "12.6", "2.5", "1.19.2", "4.3", "the release the tests run (Triton 2.51); stub: numpy < 2"),
    ("24.12", "3.12", "12.6", "", "", "", "Ubuntu 24.04; the stub takes numpy 2 (from 24.11)"),
    ("25.04", "3.12", "12.9", "", "", "", "compute capability 7.5 and later"),
    ("25.08", "3.12", "13.0", "", "", "", "CUDA 13: cupy-cuda13x, cudf-cu13"),
    ("25.09", "3.12", "13.0", "", "", "4.4+", "FIL keys renamed: is_classifier, layout, chunk_size"),
    ("26.02", "3.12", "13.x", "", "", "", "the ensemble's branches run in parallel (core#466)"),
    ("26.04", "3.12", "13.x", "2.12", "", "", ""),
    ("26.06", "3.12", "13.x", "", "", "4.7", ""),
    ("26.08", "3.12", "13.x", "", "1.28", "", ""),
)


def markdown_table() -> str:
    rows = [
        "| release | Python | CUDA | libtorch | ONNX Runtime | FIL's Treelite | extras (gpu profile) | "
        "what the image installs (gpu profile) | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for version, python, cuda, torch, ort, treelite, notes in TABLE:
        r = release(version)
        assert r.python == python and str(r.cuda_major) == cuda.split(".")[0], version  # table and rules agree
        pins = ", ".join(f"`{p}`" for p in r.requirements("gpu") + r.optional("gpu"))
        rows.append(
            f"| {version} | {python} | {cuda} | {torch or '–'} | {ort or '–'} | {treelite or '–'} | "
            f"`serve,{r.gpu_extra}` | {pins} | {notes} |"
        )
    return "\n".join(rows)


#: Where the python backend's stub is in an NGC tritonserver image (and the stand-in).
IMAGE_STUB = "/opt/tritonserver/backends/python/triton_python_backend_stub"


def stub_libpython(stub: str) -> tuple[str | None, bool]:
    """(X.Y of the libpython the stub links, whether the loader finds it), from `ldd`;
    (None, False) when the stub does not exist or links no libpython."""
    import subprocess

    if not os.path.isfile(stub):
        return None, False
    try:
        out = subprocess.run(["ldd", stub], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, False
    match = re.search(r"libpython(\d+\.\d+)\S*\s*=>\s*(\S+)", out)
    if not match:
        return None, False
    return match.group(1), match.group(2) != "not"


def problems(
    r: Release,
    profile: str,
    python: str,
    numpy_version: str | None,
    cupy: str | None,
    stub: tuple[str | None, bool] = ("", True),
    stub_path: str = IMAGE_STUB,
) -> list[str]:
    """Why a Python with these packages cannot host `profile`'s Python models under release
    `r` (empty: it can). `cupy`: the CuPy distribution installed (cupy-cuda12x, ...), if any.
    `stub`: `stub_libpython` of the image's stub: it must link this Python's libpython, and
    the loader must find it ("" for the version: not checked)."""
    out = []
    stub_python, found = stub
    if stub_python is None:
        out.append(
            f"no python-backend stub linking a libpython at {stub_path}: build FROM a tritonserver image (BASE_IMAGE)"
        )
    elif stub_python and stub_python != python:
        out.append(
            f"python3 is {python}, but the image's python-backend stub links libpython{stub_python}: "
            f"install the packages into Python {stub_python}"
        )
    elif stub_python and not found:
        out.append(
            f"the image's python-backend stub links libpython{stub_python}, which the loader does not find "
            f"(install the shared libpython{stub_python})"
        )
    if numpy_version is None:
        out.append("numpy is not installed")
    elif int(numpy_version.split(".")[0]) >= 2 and not r.stub_numpy2:
        out.append(
            f"numpy {numpy_version}: Triton {r.version}'s stub (pybind11 2.10) crashes on BYTES inputs "
            f"with numpy 2; install {r.numpy}"
        )
    if profile == "gpu":
        wanted = f"cupy-cuda{r.cuda_major}x"
        if cupy is None:
            out.append(f"the gpu profile runs its Python steps on CuPy: install {r.cupy}")
        elif cupy != wanted:
            out.append(f"{cupy} is installed, but Triton {r.version} has CUDA {r.cuda_major}: install {r.cupy}")
    return out


def check_image(version: str, profile: str, stub_path: str = IMAGE_STUB) -> list[str]:
    """`problems` of the running Python and the image's stub. Run inside the image at build
    time, so that a Python the stub cannot load or a wrong numpy fails the build, not the
    first BYTES request."""
    from importlib import metadata

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    cupy = next((name for name in ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x") if installed(name)), None)
    return problems(
        release(version),
        profile,
        "%d.%d" % sys.version_info[:2],
        installed("numpy"),
        cupy,
        stub_libpython(stub_path),
        stub_path,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m readability_triton.repository.releases")
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("numpy", "requirements", "optional", "extras", "constraints", "check"):
        p = sub.add_parser(name)
        p.add_argument("--triton-version", default=TESTED)
        p.add_argument("--profile", default="gpu")
        p.add_argument("--stub", default=IMAGE_STUB, help="check: the image's python-backend stub")
    sub.add_parser("table")
    args = parser.parse_args(argv)
    try:
        if args.what == "table":
            print(markdown_table())
            return 0
        r = release(args.triton_version)
        if args.what == "numpy":
            print(r.numpy)
        elif args.what == "requirements":
            print(" ".join(r.requirements(args.profile)))
        elif args.what == "optional":
            print(" ".join(r.optional(args.profile)))
        elif args.what == "extras":
            print(r.extras(args.profile))
        elif args.what == "constraints":
            print("\n".join(r.constraints(args.profile)))
        else:
            problems = check_image(args.triton_version, args.profile, args.stub)
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            if problems:
                return 1
            print(f"this python fits Triton {r.version}'s stub and the {args.profile} profile")
    except ReleaseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
