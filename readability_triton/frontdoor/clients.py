"""Who a client is, for fair shares and connection caps: its address, and the network it is
in (its group).

One sender with many addresses must not get many shares: an attacker spread over 50 source
addresses (127.0.0.10-59) took 50/51 of the pipeline from an honest client while each
address was a client of its own. Addresses are cheap within a network (a cloud host's /64
of IPv6, a /24 of IPv4 rented or spoofed on a local network) and dear across networks, so
the gate shares first among groups, each a network of `V4_PREFIX` / `V6_PREFIX` bits, then
among the clients of a group.

The trade-off: clients that share a network (one office behind one /24, pods of one node)
share one group's share when the pipeline is full, however many they are. `serve
--network-prefix 32,128` makes every address its own group (the old behaviour; and with it,
the Sybil attack's). Behind a proxy that names the client in a header (`--client-header`),
a value that is an address is grouped the same way, and any other value is a group of its
own.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

#: The default network of a client group: a /24 of IPv4, a /64 of IPv6.
V4_PREFIX = 24
V6_PREFIX = 64


def parse_prefixes(text: str) -> tuple[int, int]:
    """'24,64' -> (24, 64): the IPv4 and IPv6 prefix lengths (ValueError otherwise)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r}: give the IPv4 and the IPv6 prefix length, e.g. 24,64")
    v4, v6 = int(parts[0]), int(parts[1])
    if not (0 <= v4 <= 32 and 0 <= v6 <= 128):
        raise ValueError(f"{text!r}: an IPv4 prefix is 0-32 bits, an IPv6 one 0-128")
    return v4, v6


@lru_cache(maxsize=65536)
def group_of(client: str, v4: int = V4_PREFIX, v6: int = V6_PREFIX) -> str:
    """The group of a client named by its address (its network, e.g. '10.1.2.0/24'), or by
    anything else (itself)."""
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    prefix = v4 if address.version == 4 else v6
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))
