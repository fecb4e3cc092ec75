"""Which backends a server has, and whether it can serve a repository: `check_servable`
says what runs where, or what is missing and how to get it."""

from __future__ import annotations

import os

from .. import contracts as C
from ..repository.configs import read_config
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


def check_servable(server, repo: str, say=lambda message: None) -> None:
    """Whether `server` (a `TritonServer`) has a backend for every model of `repo`: `say`
    gets one line on what runs where; a missing backend is a ValueError that says how to
    get it."""
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
    say("backends: " + ", ".join(f"{m} on {b}" for m, b in needed.items() if b))
