"""`measure.launch`: what a launched serve leaves behind when it dies. (`launch_serve` itself
starts every real serve of the suite: tests/test_front_door.py, test_server.py, ...)"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from readability_triton.measure.launch import Served


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet collected by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_dead_serves_children_are_reaped_by_pid_and_start_time():
    """serve's children (tritonserver, the stubs) run in sessions of their own: when serve is
    killed they live on. `reap` ends each one it saw once serve was ready, and only while
    it is the same process (its start time unchanged), never by name."""
    parent = subprocess.Popen(
        ["sh", "-c", "setsid sleep 600 & sleep 600 & wait"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    served = Served("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "key", parent)
    deadline = time.monotonic() + 10
    while len(served.started) < 2 and time.monotonic() < deadline:
        served.remember_children()
        time.sleep(0.05)
    children = [pid for pid, _ in served.started]
    assert len(children) >= 2 and all(_alive(pid) for pid in children)
    try:
        assert served.reap() == []  # serve still runs: nothing is touched
        os.kill(parent.pid, signal.SIGKILL)  # serve dies; its children do not
        parent.wait(10)
        assert all(_alive(pid) for pid in children)
        assert sorted(served.reap()) == sorted(children)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if _alive(pid)]
        served.started = [(pid, "1") for pid in children]  # another process under a reused PID
        assert served.reap() == []
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
