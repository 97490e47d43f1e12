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
import socket
from dataclasses import dataclass
from typing import Iterator

import torch

BACKENDS = ("nccl", "gloo")


@dataclass(frozen=True)
class SyncGroup:
    host: str          # actor rank 0's address, where the group's TCPStore listens
    port: int
    world_size: int    # 1 + number of engines
    backend: str       # "nccl" | "gloo"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str         # e.g. "float32", a torch dtype's name


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def open_group(group: SyncGroup, rank: int, timeout_s: float = 300.0) -> torch.distributed.ProcessGroup:
    """Join the sync group (blocks until all `world_size` members have joined)."""
    import torch.distributed as dist
    if group.backend not in BACKENDS:
        raise ValueError(f"--vllm_sync_backend {group.backend}: use one of {', '.join(BACKENDS)}")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(group.host, group.port, group.world_size, is_master=rank == 0, timeout=timeout)
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


def receive(pg: torch.distributed.ProcessGroup, tensor_specs: list[TensorSpec],
            device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
    """Engine side: (name, tensor) in the root's order, each received when it is asked for."""
    for spec in tensor_specs:
        t = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=device)
        pg.broadcast(t, 0).wait()
        yield spec.name, t
