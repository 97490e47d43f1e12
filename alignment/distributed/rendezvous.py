"""The rendezvous store of a process group, listening on MASTER_ADDR alone.

torch's env:// rendezvous makes rank 0 start a TCPStore that listens on every interface (`*:<port>`),
without authentication: any host that reaches the port can read and write the group's keys. So rank 0
binds the listening socket itself, on MASTER_ADDR (127.0.0.1 for a one-process run, the node's address
for a Ray group or a launcher's ranks: the interface the other nodes use), and hands it to the TCPStore
(`master_listen_fd`); the other ranks connect to it. Under torchrun's elastic agent
(TORCHELASTIC_USE_AGENT_STORE) the ranks use the agent's store, which the agent starts itself on every
interface: rank 0 says so once, with the launchers that keep it closed.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket

import torch

TIMEOUT = datetime.timedelta(minutes=30)  # torch's own default for gloo and NCCL groups
log = logging.getLogger(__name__)


def agent_store_warning(env: dict[str, str]) -> str | None:
    """The one line rank 0 logs when torchrun's elastic agent serves the group's store (torch's listener, on
    `*:<MASTER_PORT>` without authentication whatever address it is given: measured with ss), else None."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or env.get("RANK") != "0":
        return None
    return (
        f"torchrun's elastic agent serves this run's rendezvous store on every interface (port "
        f"{env.get('MASTER_PORT')}, no authentication): on a machine others can reach, launch with `deepspeed "
        f"--module` (its ranks' store listens on MASTER_ADDR alone) or firewall the port"
    )


def listening_socket(addr: str, port: int) -> tuple[int, int]:
    """A TCP socket bound to addr:port (0: a port the OS picks) and listening; returns its file descriptor
    (the store takes it over) and its port."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    return sock.detach(), bound


def init_process_group(backend: str) -> None:
    """torch.distributed for this process from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, its store bound to
    MASTER_ADDR (module docstring)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        if line := agent_store_warning(dict(os.environ)):
            log.warning(line)
        torch.distributed.init_process_group(backend, timeout=TIMEOUT)
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    fd = listening_socket(addr, port)[0] if rank == 0 else None
    store = torch.distributed.TCPStore(addr, port, world, rank == 0, TIMEOUT, master_listen_fd=fd)
    torch.distributed.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=TIMEOUT)
