"""Which door worker a new connection reaches: every worker listens on the same ports
(SO_REUSEPORT), and a classic BPF program attached to the ports' group picks the worker from
the client's network (its address under the `clients` prefix), so that one network's
connections all meet one worker's gate, whose fair shares then hold as they do with one
worker (`workers`).

Without the program the kernel picks by a hash of both addresses and ports: a client's
connections would spread over the workers, and one with many connections would take a
share at each. Behind a proxy (`--client-header`) every connection comes from the proxy and
the program is not attached: the kernel's spread is then what shares the proxy's
connections out.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

#: setsockopt option (asm-generic/socket.h): a classic BPF program for a SO_REUSEPORT group.
SO_ATTACH_REUSEPORT_CBPF = 51
#: SKF_NET_OFF (linux/filter.h) as an unsigned word: loads relative to the network header.
_NET = 0xFFF00000
#: Fibonacci hashing's multiplier (2^32 / golden ratio): spreads neighbouring networks.
_SPREAD = 0x9E3779B1

# classic BPF opcodes (linux/bpf_common.h)
_LDB_ABS, _LDW_ABS = 0x30, 0x20
_AND, _RSH, _MUL, _MOD, _XOR_X = 0x54, 0x74, 0x24, 0x94, 0xAC
_JEQ, _TAX, _RET_A = 0x15, 0x07, 0x16


def _mask(prefix: int, word: int) -> int:
    """The `word`-th 32 bits (0-based) of a `prefix`-bit network mask."""
    bits = max(0, min(32, prefix - 32 * word))
    return (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF if bits else 0


def program(workers: int, v4_prefix: int, v6_prefix: int) -> list[tuple[int, int, int, int]]:
    """The program: the client's network (the source address under the prefix; an IPv6
    network's first 64 bits at most), hashed, modulo `workers`. Instructions as (code, jt,
    jf, k)."""

    def ins(code: int, k: int = 0, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
        return (code, jt, jf, k & 0xFFFFFFFF)

    pick = [ins(_MUL, _SPREAD), ins(_RSH, 16), ins(_MOD, workers), ins(_RET_A)]
    v4 = [ins(_LDW_ABS, _NET + 12), ins(_AND, _mask(v4_prefix, 0)), *pick]
    v6 = [
        ins(_LDW_ABS, _NET + 8),
        ins(_AND, _mask(v6_prefix, 0)),
        ins(_TAX),
        ins(_LDW_ABS, _NET + 12),
        ins(_AND, _mask(v6_prefix, 1)),
        ins(_XOR_X),
        *pick,
    ]
    # the IP version, then the IPv4 branch falls through; IPv6 jumps past it
    return [ins(_LDB_ABS, _NET), ins(_RSH, 4), ins(_JEQ, 6, jt=len(v4), jf=0), *v4, *v6]


def attach(sock: socket.socket, workers: int, v4_prefix: int, v6_prefix: int) -> None:
    """Attach the program to the SO_REUSEPORT group `sock` listens in (OSError where the
    kernel refuses it)."""
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in program(workers, v4_prefix, v6_prefix))
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("@HP", len(code) // 8, ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)


def listening_sockets(port: int) -> list[socket.socket]:
    """This process's listening TCP sockets on `port` (duplicates: close them), found among
    its descriptors: grpc makes its own and lends none."""
    found = []
    seen = set()  # a duplicate made here may take a number listed before it
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            link = os.readlink(f"/proc/self/fd/{fd}")
            if not link.startswith("socket:") or link in seen:
                continue
            seen.add(link)
            copy = os.dup(fd)
        except (OSError, ValueError):
            continue
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            continue
        try:
            listening = sock.type == socket.SOCK_STREAM and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if listening and sock.getsockname()[1] == port:
                found.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    return found


def steer(port: int, workers: int, v4_prefix: int, v6_prefix: int) -> int:
    """Attach the program to every group this process listens in on `port`; how many."""
    attached = 0
    for sock in listening_sockets(port):
        try:
            attach(sock, workers, v4_prefix, v6_prefix)
            attached += 1
        finally:
            sock.close()
    return attached
