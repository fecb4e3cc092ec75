"""Which backends a server has, and the repository it can serve: `servable` says what runs
where, and where the server has no FIL backend serves a view of the repository whose forest
runs as the portable profile's Python model."""

from __future__ import annotations

import os
import shutil
import tempfile

from .. import contracts as C
from ..repository.assemble import backends_root
from ..repository.configs import read_config, render_config
from ..repository.profiles import PORTABLE_BACKENDS, VERSION
from .installation import available_backends, prepare_backends


def backends_needed(repo: str) -> dict[str, str]:
    """{model: the backend its config names} of an assembled repository (a platform such as
    onnxruntime_onnx counts as the backend that serves it)."""
    platforms = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "ensemble": ""}
    out = {}
    for model in C.ALL_MODELS:
        config = read_config(os.path.join(repo, model, "config.pbtxt"))
        out[model] = config.backend or platforms.get(config.platform, config.platform)
    return out


def python_forest_view(repo: str, out: str) -> str:
    """A view of `repo` whose forest runs as the Python model of the portable profile
    (Treelite's GTIL on `checkpoint.tl`, the checkpoint FIL would read), for a server without
    the FIL backend: `out` links every other model of `repo` and holds the forest's config
    and model.py. Returns `out`."""
    os.makedirs(out, exist_ok=True)
    for model in C.ALL_MODELS:
        target = os.path.join(out, model)
        if os.path.lexists(target):
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.remove(target)
        if model != C.FOREST:
            os.symlink(os.path.abspath(os.path.join(repo, model)), target)
    fil = read_config(os.path.join(repo, C.FOREST, "config.pbtxt"))
    n_features = int(fil.input[0].dims[0])
    folder = os.path.join(out, C.FOREST, VERSION)
    os.makedirs(folder)
    with open(os.path.join(out, C.FOREST, "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(render_config(C.FOREST, "portable", n_features=n_features))
    shutil.copyfile(
        os.path.join(backends_root(), PORTABLE_BACKENDS[C.FOREST], "model.py"), os.path.join(folder, "model.py")
    )
    source = os.path.join(repo, C.FOREST, VERSION)
    for name in os.listdir(source):
        os.symlink(os.path.abspath(os.path.join(source, name)), os.path.join(folder, name))
    return out


def servable(server, repo: str, say=lambda message: None) -> str:
    """The repository to hand `server` (a `TritonServer`): `repo`, or a view of it whose
    forest runs as a Python model when the server has no FIL backend (RAPIDS' FIL is not
    built here), in a temporary folder the caller removes; `say` gets one line on what runs
    where. A backend that is missing otherwise is a ValueError that says how to get it."""
    if not os.path.isfile(os.path.join(repo, C.ENSEMBLE, "config.pbtxt")):
        return repo
    if not server.home:
        prepare_backends(server.backend_dir, server.native)
    have = available_backends(server.backend_dir)
    needed = backends_needed(repo)
    missing = {model: backend for model, backend in needed.items() if backend and backend not in have}
    if missing.get(C.FOREST) == "fil":
        missing.pop(C.FOREST)
        repo = python_forest_view(repo, tempfile.mkdtemp(prefix="readability-triton-view-"))
        say(
            "this tritonserver has no FIL backend: the forest runs as a Python model (Treelite's GTIL on the same "
            "checkpoint.tl), as in the portable profile"
        )
        needed = backends_needed(repo)
    if missing:
        raise ValueError(
            f"this tritonserver has no backend for {', '.join(f'{m} ({b})' for m, b in missing.items())} "
            f"(in {server.backend_dir}): build Triton's own with `make native-backends`, serve an NGC "
            "image's tritonserver with --tritonserver, or assemble --profile portable"
        )
    say("backends: " + ", ".join(f"{m} on {b}" for m, b in needed.items() if b))
    return repo
