"""Weight sync over a collective (OpenRLHF's `--vllm_sync_backend`): actor rank 0 broadcasts the
policy to every rollout engine, one tensor at a time, in a process group of its own — NCCL on
GPUs, gloo on CPU machines. Each engine reloads from a generator that receives tensor k while
vLLM loads tensor k-1, so neither side holds more than the model plus one tensor in flight.

The group is separate from the trainers' default group (`TCPStore` + a `ProcessGroup*` object,
no `init_process_group`), so an engine can join it without joining the actor's DeepSpeed group.
Rank 0 is actor rank 0; engine k is rank k + 1. Names, shapes and dtypes travel beforehand as a
plain list (`TensorSpec`s), so the receivers allocate each tensor before its broadcast.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist

from alignment.distributed.rendezvous import listening_socket

BACKENDS = ("nccl", "gloo")


@dataclass(frozen=True)
class SyncGroup:
    host: str  # actor rank 0's address, where the group's TCPStore listens
    port: int
    world_size: int  # 1 + number of engines
    backend: str  # "nccl" | "gloo"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # e.g. "float32", a torch dtype's name


def listen(host: str, world_size: int, timeout_s: float = 300.0) -> torch.distributed.TCPStore:
    """The root's store at `host`, on a port the OS picks while binding it (`store.port`). Picking a
    free port first and binding it later lost the race to another process now and then (EADDRINUSE). The
    socket is bound to `host` alone, not every interface (alignment/distributed/rendezvous.py)."""

    fd, port = listening_socket(host, 0)
    return dist.TCPStore(
        host,
        port,
        world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
        master_listen_fd=fd,
    )


def open_group(
    group: SyncGroup, rank: int, store: torch.distributed.Store | None = None, timeout_s: float = 300.0
) -> torch.distributed.ProcessGroup:
    """Join the sync group (blocks until all `world_size` members have joined). Rank 0 passes the
    store it opened with `listen`; the others connect to `group.host:group.port`."""

    if group.backend not in BACKENDS:
        raise ValueError(f"--vllm_sync_backend {group.backend}: use one of {', '.join(BACKENDS)}")
    if (store is None) != (rank != 0):
        raise ValueError("the sync group's rank 0 opens the store (listen); every other rank connects to it")
    timeout = datetime.timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(group.host, group.port, group.world_size, is_master=False, timeout=timeout)
    if group.backend == "nccl":
        return dist.ProcessGroupNCCL(store, rank, group.world_size)
    return dist.ProcessGroupGloo(store, rank, group.world_size, timeout)


def specs(state: dict[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec(k, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for k, t in state.items()]


def broadcast(pg: torch.distributed.ProcessGroup, state: dict[str, torch.Tensor], device: torch.device) -> int:
    """Root side: send every tensor of `state` in order; returns the bytes sent."""
    sent = 0
    for tensor in state.values():
        t = tensor.detach().to(device).contiguous()
        pg.broadcast(t, 0).wait()
        sent += t.numel() * t.element_size()
    return sent


def receive(
    pg: torch.distributed.ProcessGroup, tensor_specs: list[TensorSpec], device: torch.device
) -> Iterator[tuple[str, torch.Tensor]]:
    """Engine side: (name, tensor) in the root's order, each received when it is asked for."""
    for spec in tensor_specs:
        t = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=device)
        pg.broadcast(t, 0).wait()
        yield spec.name, t
