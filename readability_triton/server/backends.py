"""Which backends a server has, and whether it can serve a repository: `check_servable`
says what runs where, or what is missing and how to get it; `writable_forest_view` is the
repository FIL can load from where its checkpoint is read-only."""

from __future__ import annotations

import logging
import os
import shutil

from .. import contracts as C
from ..layout import CHECKPOINT
from ..repository.configs import present_models, read_config
from ..repository.profiles import VERSION
from .installation import available_backends, prepare_backends

log = logging.getLogger(__name__)


def backends_needed(repo: str) -> dict[str, str]:
    """{model: the backend its config names} of an assembled repository (a platform such as
    onnxruntime_onnx counts as the backend that serves it)."""
    platforms = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "ensemble": ""}
    out = {}
    for model in present_models(repo):  # validate: only in the parallel wiring
        config = read_config(os.path.join(repo, model, "config.pbtxt"))
        out[model] = config.backend or platforms.get(config.platform, config.platform)
    return out


def check_servable(server, repo: str) -> None:
    """Whether `server` (a `TritonServer`) has a backend for every model of `repo`: logs one
    line on what runs where; a missing backend is a ValueError that says how to get it."""
    if not os.path.isfile(os.path.join(repo, C.ENSEMBLE, "config.pbtxt")):
        return
    if not server.home:
        prepare_backends(server.backend_dir, server.native)
    have = available_backends(server.backend_dir)
    needed = backends_needed(repo)
    missing = {model: backend for model, backend in needed.items() if backend and backend not in have}
    if missing:
        raise ValueError(
            f"this tritonserver has no backend for {', '.join(f'{m} ({b})' for m, b in missing.items())} "
            f"(in {server.backend_dir}): build Triton's own with `make native-backends`, serve an NGC image's "
            "tritonserver with --tritonserver, or assemble --profile portable (every model the python backend's)"
        )
    log.info("backends: " + ", ".join(f"{m} on {b}" for m, b in needed.items() if b))


def writable_forest_view(repo: str, out: str) -> str | None:
    """A view of `repo` in `out` whose FIL forest reads a copy of its checkpoint, where the
    repository's own is not writable (a read-only image or volume); None where no view is
    needed. FIL r24.10 opens checkpoint.tl with a read-write `std::fstream`
    (fil_backend src/tl_utils.h), so on a read-only file system the forest fails to load
    ("Could not open model file"). The view links every other model and copies the
    forest's folder (its config and a checkpoint of a few MB); the caller removes `out`."""
    forest = os.path.join(repo, C.FOREST)
    checkpoint = os.path.join(forest, VERSION, CHECKPOINT)
    if not os.path.isfile(os.path.join(forest, "config.pbtxt")):  # the fused repository: inside featurize
        return None
    if read_config(os.path.join(forest, "config.pbtxt")).backend != "fil" or os.access(checkpoint, os.W_OK):
        return None
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(repo):
        if name != C.FOREST:
            os.symlink(os.path.abspath(os.path.join(repo, name)), os.path.join(out, name))
    shutil.copytree(forest, os.path.join(out, C.FOREST), symlinks=False)
    for base, _, files in os.walk(os.path.join(out, C.FOREST)):
        for name in files:
            os.chmod(os.path.join(base, name), 0o644)
    log.info(f"the forest's checkpoint is read-only and FIL r24.10 opens it read-write: serving a copy ({out})")
    return out
