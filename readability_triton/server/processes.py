"""The processes of a tritonserver, read from /proc: whether a PID runs, the python
backend's stubs and the model instance each serves, a process group's members, and the
reaping of orphans adopted as a subreaper (or as PID 1 in a container).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import time


def exit_words(status: int | None) -> str:
    """A process's exit status in words: "status 1", "killed by SIGSEGV (status -11)"."""
    if status is not None and status < 0:
        try:
            return f"killed by {signal.Signals(-status).name} (status {status})"
        except ValueError:
            pass
    return f"status {status}"


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, pgrp, ...], or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs (exists and is not a zombie)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def stopped(pid: int) -> bool:
    """Whether `pid` is stopped (SIGSTOP, SIGTSTP, or held by a tracer): it runs no code
    until it is continued, and answers nothing meanwhile."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] in ("T", "t")


def python_stubs(server_pid: int) -> dict[int, str]:
    """{pid: model instance name} of the python-backend stubs a tritonserver started: its
    children running `triton_python_backend_stub`, whose 9th argument is the instance
    (python_backend r24.10, stub_launcher.cc: `<stub> <model.py> <shm region> <size>
    <growth> <parent pid> <backend dir> <ipc handle> <instance> <runtime>`)."""
    stubs = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None or fields[0] == "Z" or int(fields[1]) != server_pid:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                args = handle.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if args[0].endswith("triton_python_backend_stub") and len(args) > 8:
            stubs[int(entry)] = args[8]
    return stubs


def instance_model(instance: str) -> str:
    """The model of a model instance name (`featurize_0_0` -> `featurize`)."""
    parts = instance.rsplit("_", 2)
    return parts[0] if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() else instance


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), so
    that the stubs of a tritonserver that died come back to it to be ended and reaped
    rather than to init. In a container where this process is PID 1 it is already so."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def reap_zombies(keep: tuple[int, ...] = ()) -> list[int]:
    """Reap this process's zombie children (orphans adopted as a subreaper or as PID 1),
    except `keep` (children a `subprocess.Popen` waits for itself); the PIDs reaped."""
    me, reaped = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in keep:
            continue
        fields = _stat_fields(int(entry))
        if fields is not None and fields[0] == "Z" and int(fields[1]) == me:
            try:
                os.waitpid(int(entry), os.WNOHANG)
                reaped.append(int(entry))
            except ChildProcessError:
                pass
    return reaped


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group `pgid`, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry))
    return members


def kill_process_group(pgid: int) -> list[int]:
    """SIGKILL what is left of the process group `pgid` (the server started it, as its
    session leader; its stubs are members) and wait until it is gone (at most 5 s);
    the PIDs that were still there."""
    left = group_members(pgid)
    if left:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + 5
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return left


#: /proc/net/tcp's states of a connection the server has not closed yet: ESTABLISHED,
#: SYN_RECV, CLOSE_WAIT (the client closed; the server's loop has not yet).
_OPEN_STATES = {"01", "03", "08"}


def http_connections(port: int) -> int:
    """TCP connections to local `port` (this network namespace) that are open or closing
    (0 where /proc/net cannot be read)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] in _OPEN_STATES and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        count += 1
        except (OSError, ValueError):
            continue
    return count


#: Where free ports are drawn from when the kernel's ephemeral range cannot be read.
_EPHEMERAL_DEFAULT = (32768, 60999)
_random = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            low, high = (int(word) for word in handle.read().split())
        return low, high
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def free_ports(count: int, taken: tuple[int, ...] = ()) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now, none of them in `taken`, drawn at
    random from outside the kernel's ephemeral range: a port the kernel hands out
    (`bind(0)`) can be handed out again, before the server binds it, as the local port of
    some client's outgoing connection (a CI run's tritonserver found its HTTP port taken
    so). Each is held bound until all are picked, so the `count` never repeat."""
    low, high = ephemeral_range()
    pool = [(10000, low - 1), (high + 1, 65535)]
    pool = [(a, b) for a, b in pool if b - a >= 1000] or [(1024, 65535)]
    held: list[socket.socket] = []
    try:
        for _ in range(count * 200):
            if len(held) == count:
                break
            first, last = _random.choice(pool)
            port = _random.randint(first, last)
            if port in taken or any(sock.getsockname()[1] == port for sock in held):
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise OSError(f"found {len(held)} of {count} free ports on 127.0.0.1 outside {low}-{high}")
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


def connections_closed(port: int, limit: float) -> bool:
    """Wait, at most `limit` s, until no TCP connection to local `port` is open or closing;
    whether none is. On SIGTERM tritonserver 2.51 counts open HTTP connections down, a
    second per look, for up to its exit timeout, and its count lags the sockets: the drain's
    own last call, closed a moment before, cost a second of every stop."""
    deadline = time.monotonic() + limit
    while http_connections(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
