"""A plain deployment's start (`triton-command`): the bash line that runs a `TritonServer`
as its `start` would, with no readability-triton process beside tritonserver."""

from __future__ import annotations

import os
import shlex
import sys

from .. import contracts as C
from .. import threads
from ..errors import ServerError
from ..stub.admission import METRICS_URL_ENV
from . import keyshim
from .admin import ADMIN_HEADER, ADMIN_KEY_ENV, RESTRICTED_APIS
from .backends import check_servable
from .installation import library_path, prepare_backends, stub_numpy_problem
from .tritonserver import TritonServer

#: The shell variable the line reads the key into (never exported: in no environment).
_KEY_VARIABLE = "readability_triton_key"


def shell_line(server: TritonServer) -> str:
    """One bash line that starts `server` with no readability-triton process beside it
    (`triton-command`: a plain deployment), with `start`'s command, environment and
    backends (prepared now): the libraries, this Python's `bin` first on PATH for the
    stubs, the metrics URL the first step sheds load by. The restricted APIs are closed
    with the key in $READABILITY_TRITON_ADMIN_KEY (or the file
    $READABILITY_TRITON_ADMIN_KEY_FILE names), read when the line runs, checked, and
    handed over through `keyshim` from a pipe (bash's printf is a builtin: the key is on no
    command line and in no environment). `exec`: the PID it runs under is tritonserver's.
    What `start` does that the line does not: cap the python backend's /dev/shm regions
    (`shm_region_limit`: its file-size limit would cap a log redirected to a file too)."""
    server.check_paths()
    if not server.home:
        prepare_backends(server.backend_dir, server.native)
    problem = None if server.home else stub_numpy_problem()
    if problem:
        raise ServerError(problem)
    q = shlex.quote
    key, variable = ADMIN_KEY_ENV, _KEY_VARIABLE
    spec = f"{','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}="
    settings = [
        f'LD_LIBRARY_PATH={q(os.pathsep.join(library_path(server.home)))}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
        f'PATH={q(os.path.dirname(sys.executable))}:"$PATH"',
        f"{METRICS_URL_ENV}={q(server.metrics_url)}",
        *(["OMP_WAIT_POLICY=PASSIVE"] if threads.enabled() else []),
        f'LD_PRELOAD={q(keyshim.locate())}"${{LD_PRELOAD:+ $LD_PRELOAD}}"',
        f"{keyshim.ARGS_FD_ENV}=3",
    ]
    read = (
        f'{variable}="${{{key}:-$([ -n "${{{key}_FILE:-}}" ] && tr -d "[:space:]" < "${key}_FILE")}}"; '
        f'[[ ${variable} =~ ^[A-Za-z0-9._~-]+$ ]] || {{ echo "set {key} (or {key}_FILE, a file that holds it) '
        f'to the key of the restricted APIs: letters, digits and -_.~" >&2; exit 2; }}; '
    )
    secret = " ".join(f'{flag} "{spec}${variable}"' for flag in ("--http-restricted-api", "--grpc-restricted-protocol"))
    return (
        f"{read}exec env -u {key} -u {key}_FILE {' '.join(settings)} {' '.join(map(q, server.command()))} "
        f"3< <(printf '%s\\0' {secret})"
    )


def plain_command(
    repository: str, http_port: int, grpc_port: int, metrics_port: int, address: str = "127.0.0.1", home: str = ""
) -> str:
    """`shell_line` of a server on `repository` (an assembled one; ValueError where it is
    not, or where this tritonserver lacks a backend it needs), listening on the given ports
    of `address`; `home`: an installed tritonserver, else $READABILITY_TRITON_HOME, else
    the wheel's."""
    repository = os.path.abspath(repository)
    if not os.path.isfile(os.path.join(repository, C.ENSEMBLE, "config.pbtxt")):
        raise ValueError(
            f"{repository} holds no '{C.ENSEMBLE}' ensemble: assemble one first "
            "(readability-triton assemble --profile portable --artifacts DIR --out REPO)"
        )
    server = TritonServer(
        repository,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        home=home,
        address=address,
        shm_prefix=f"readability-triton-plain-{http_port}-",  # one per server of the machine
    )
    check_servable(server, repository)
    return shell_line(server)
