"""The shim that hands tritonserver the admin key without its command line: built with the
system's compiler, it gives a program its secret arguments after its own, never shows them
in /proc/PID/cmdline, and leaves no trace in the environment of what the program starts."""

from __future__ import annotations

import os
import subprocess

import pytest

from readability_triton.errors import ServerError
from readability_triton.server import keyshim

PROGRAM = (
    "import os, subprocess, sys; print(repr(sys.argv[1:])); "
    "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[1:-1]); "
    "print(subprocess.run(['sh', '-c', 'echo \"$LD_PRELOAD|$READABILITY_TRITON_ARGS_FD\"'], "
    "capture_output=True, text=True).stdout.strip())"
)


def _run(secret: list[str], env: dict | None = None) -> list[str]:
    env, fd = keyshim.launch(secret, env if env is not None else dict(os.environ))
    try:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", PROGRAM, "visible"],
            env=env,
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(keyshim.KEYSHIM_ENV, raising=False)


def test_secret_arguments_reach_the_program_but_never_its_command_line():
    argv, cmdline, children = _run(["--http-restricted-api", "model-repository:admin-key=s3cr3t-KEY"])
    assert argv == repr(["visible", "--http-restricted-api", "model-repository:admin-key=s3cr3t-KEY"])
    assert "s3cr3t" not in cmdline and "visible" in cmdline
    assert children == "|"  # neither LD_PRELOAD nor the descriptor reaches what it starts


def test_the_shim_is_built_once_per_source_and_a_given_one_is_used(tmp_path, monkeypatch):
    first = keyshim.locate()
    assert os.path.isfile(first) and keyshim.locate() == first
    monkeypatch.setenv(keyshim.KEYSHIM_ENV, first)
    assert keyshim.locate() == first
    monkeypatch.setenv(keyshim.KEYSHIM_ENV, str(tmp_path / "missing.so"))
    with pytest.raises(ServerError, match="does not exist"):
        keyshim.locate()


def test_without_a_compiler_it_says_how_to_get_the_shim(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ServerError, match="no C compiler.*apt-get install gcc"):
        keyshim.build(str(tmp_path / "keyshim.so"))
    with pytest.raises(ServerError, match="failed"):
        keyshim.build(str(tmp_path / "keyshim.so"), compiler="/bin/false")
    assert not os.path.exists(tmp_path / "keyshim.so")


def test_a_program_whose_arguments_cannot_be_read_does_not_start(tmp_path):
    env = dict(os.environ, LD_PRELOAD=keyshim.locate(), READABILITY_TRITON_ARGS_FD="99")  # not open
    done = subprocess.run(["/usr/bin/python3", "-c", "print('ran')"], env=env, capture_output=True, text=True)
    assert done.returncode == 97 and "ran" not in done.stdout and "keyshim: read" in done.stderr
