"""A free TCP port for a process group's rank 0 or a Ray head: plain sockets, so the Prefect side can ask
without importing Ray."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Ray's own ports are below this (its worker ports default to 10002-19999)
_LOWEST = 20000


def free_port(ip: str, ephemeral_low: int | None = None) -> int:
    """A port free on `ip` now, chosen below the kernel's ephemeral range. Between this check and the
    process group's bind, a port from that range can become the local port of any outgoing
    connection (a Ray node makes many): a chaos run of 2026-11-28 lost a retry to EADDRINUSE so.
    A port outside the range is only taken by an explicit bind. Where the range leaves no room
    below it, any free port."""
    low = _ephemeral_low() if ephemeral_low is None else ephemeral_low
    candidates = random.sample(range(_LOWEST, low), min(64, low - _LOWEST)) if low > _LOWEST else []
    for port in [*candidates, 0]:
        with socket.socket() as s:
            try:
                s.bind((ip, port))
            except OSError:  # taken: try the next candidate (0: the kernel picks)
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {ip}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: the IANA range's start
        return 49152
