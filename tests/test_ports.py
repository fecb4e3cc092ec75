"""Ports for the servers the tools and tests start: free, distinct, and outside the
kernel's ephemeral range, where an outgoing connection could take one before the server
binds it (the cause of a CI failure: "Socket '127.0.0.1:47207' already in use")."""

from __future__ import annotations

import socket

import pytest

from readability_triton.server import processes as P


def test_ports_are_free_distinct_and_never_ephemeral():
    low, high = P.ephemeral_range()
    for _ in range(50):
        ports = P.free_ports(4)
        assert len(set(ports)) == 4
        assert all(not low <= port <= high for port in ports), (ports, low, high)
        for port in ports:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_a_port_held_by_a_listener_or_taken_is_not_picked(monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        held = listener.getsockname()[1]
        monkeypatch.setattr(P, "ephemeral_range", lambda: (0, 0))
        draws = iter([held, held, held + 1 if held < 65535 else held - 1, 20001])
        monkeypatch.setattr(P._random, "randint", lambda a, b: next(draws))
        monkeypatch.setattr(P._random, "choice", lambda pool: pool[0])
        taken = held + 1 if held < 65535 else held - 1
        assert P.free_ports(1, (taken,)) == [20001]


def test_outgoing_connections_never_land_on_a_picked_port():
    """The kernel's own picks for outgoing connections stay inside its range, so a port
    from `free_ports` cannot be taken by one between the pick and the server's bind."""
    low, high = P.ephemeral_range()
    picked = set(P.free_ports(8))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        clients = []
        try:
            for _ in range(32):
                client = socket.create_connection(server.getsockname())
                clients.append(client)
                local = client.getsockname()[1]
                assert low <= local <= high and local not in picked
        finally:
            for client in clients:
                client.close()


def test_too_few_free_ports_says_so(monkeypatch):
    monkeypatch.setattr(socket.socket, "bind", lambda self, address: (_ for _ in ()).throw(OSError("in use")))
    with pytest.raises(OSError, match="found 0 of 2 free ports"):
        P.free_ports(2)
