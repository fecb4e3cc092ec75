"""Arguments tritonserver gets without their ever being on its command line: the admin key.

Triton 2.51 takes the key of its restricted APIs only as a command-line flag, and any local
user can read a process's command line (`ps`, /proc/PID/cmdline). `keyshim.c`, preloaded
into tritonserver, reads the secret arguments from an inherited pipe before `main` runs and
hands `main` its own arguments followed by them; the command line stays without them (see
the C file). It is compiled once per source and machine with the system's C compiler into
the user's cache, or taken ready-made from $READABILITY_TRITON_KEYSHIM (the image builds
it in).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

from ..errors import ServerError

#: A ready-made shim (the image's), used instead of compiling one.
KEYSHIM_ENV = "READABILITY_TRITON_KEYSHIM"
#: The variable that tells the shim which file descriptor holds the arguments.
ARGS_FD_ENV = "READABILITY_TRITON_ARGS_FD"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keyshim.c")


def _cache_dir() -> str:
    return os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "readability-triton"
    )


def build(out: str, compiler: str | None = None) -> str:
    """Compile the shim into `out` (ServerError, with the compiler's words, when it fails)."""
    compiler = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise ServerError(
            "no C compiler (cc) to build the shim that keeps the admin key off tritonserver's command "
            f"line: install one (apt-get install gcc), or point ${KEYSHIM_ENV} at a built keyshim.so "
            f"(cc -shared -fPIC -O2 -o keyshim.so {SOURCE} -ldl)"
        )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), suffix=".so")
    os.close(handle)
    try:
        done = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", temporary, SOURCE, "-ldl"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise ServerError(f"building the admin-key shim with {compiler} failed: {done.stderr.strip()[-800:]}")
        os.chmod(temporary, 0o755)
        os.replace(temporary, out)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return out


def locate() -> str:
    """The shim's path: $READABILITY_TRITON_KEYSHIM, else the one compiled for this source
    and machine (compiled now if missing)."""
    given = os.environ.get(KEYSHIM_ENV)
    if given:
        if not os.path.isfile(given):
            raise ServerError(f"${KEYSHIM_ENV} names {given}, which does not exist")
        return given
    with open(SOURCE, "rb") as handle:
        digest = hashlib.sha256(handle.read() + platform.machine().encode()).hexdigest()[:16]
    path = os.path.join(_cache_dir(), f"keyshim-{digest}.so")
    return path if os.path.isfile(path) else build(path)


def launch(secret_args: list[str], env: dict[str, str]) -> tuple[dict[str, str], int]:
    """An environment that preloads the shim and a pipe's read end that holds
    `secret_args`, to pass to the child (`pass_fds`); the caller closes the read end
    after starting it."""
    shim = locate()
    data = b"".join(arg.encode("utf-8") + b"\0" for arg in secret_args)
    if any(b"\0" in arg.encode("utf-8") for arg in secret_args):
        raise ServerError("an argument cannot hold a NUL character")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # small (under the pipe's 64 KiB): never blocks
    finally:
        os.close(write_end)
    preload = " ".join(p for p in (shim, env.get("LD_PRELOAD", "")) if p)
    return {**env, "LD_PRELOAD": preload, ARGS_FD_ENV: str(read_end)}, read_end
