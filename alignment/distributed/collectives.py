"""Reductions, gathers and barriers across the ranks of a stage (torch.distributed), written once.

Each is the identity, or a no-op, in a run without a process group (one process, or a test), so callers
never ask whether they run distributed. Tensors travel on the device the backend reduces: CUDA under
NCCL, CPU under gloo.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if initialized() else 1


def barrier() -> None:
    if initialized():
        dist.barrier()


def collective_device() -> torch.device:
    """Where a collective's tensor must live: NCCL reduces CUDA tensors only, gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sum_across_ranks(values: torch.Tensor) -> torch.Tensor:
    """Sums `values` across ranks in place (a CPU tensor travels through the GPU under NCCL)."""
    if initialized():
        t = values.to(collective_device())  # `values` itself when already there
        dist.all_reduce(t)
        if t is not values:
            values.copy_(t)
    return values


def mean_across_ranks(values: dict[str, float]) -> dict[str, float]:
    if world_size() == 1 or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=collective_device())
    dist.all_reduce(t)
    return {k: v / dist.get_world_size() for k, v in zip(keys, t.tolist())}


def max_across_ranks(n: int) -> int:
    if world_size() == 1:
        return n
    t = torch.tensor([n], dtype=torch.long, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def gather_to_main(items: list[T], key: Callable[[T], int]) -> list[T]:
    """Every rank's items on rank 0, sorted by `key` (stable: items with one key keep their order);
    the other ranks get []."""
    if world_size() == 1:
        return items
    parts: list[list[T]] | None = [[] for _ in range(dist.get_world_size())] if dist.get_rank() == 0 else None
    dist.gather_object(items, parts, dst=0)
    return sorted((x for part in parts for x in part), key=key) if parts is not None else []


def gather_everywhere(items: list[T]) -> list[T]:
    """Every rank's items on every rank, rank 0's first (the identity without a process group)."""
    if world_size() == 1:
        return items
    parts: list[list[T]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(parts, items)
    return [x for part in parts for x in part]
