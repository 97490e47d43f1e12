"""Process-group setup for every launcher: plain `python -m`, `deepspeed`, `torchrun`, Ray actors.

CPU ranks use gloo (oneCCL is not on PyPI); GPUs use NCCL. Threads per rank are set so that
ranks on one node don't oversubscribe its cores (the deepspeed launcher does not do this).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace

import deepspeed
import torch

from alignment.config.base import ConfigError
from alignment.distributed import rendezvous
from alignment.distributed.ports import free_port

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: str  # "cpu" | "cuda"
    tp: int = 1  # --ds_tensor_parallel_size: consecutive ranks share one data-parallel replica (DeepSpeed AutoTP)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def dp_rank(self) -> int:
        """This rank's data-parallel replica: the ranks of one tensor-parallel group see the same batches."""
        return self.rank // self.tp

    @property
    def dp_size(self) -> int:
        return self.world_size // self.tp

    def tensor_parallel(self, tp: int) -> "Runtime":
        """This runtime with AutoTP groups of `tp` consecutive ranks (DeepSpeed's mesh puts the tensor-parallel
        dimension innermost)."""
        if self.world_size % tp:
            raise ConfigError(
                f"--ds_tensor_parallel_size {tp} does not divide the world size {self.world_size}: launch a "
                f"multiple of {tp} ranks (e.g. deepspeed --num_gpus {tp})"
            )
        return replace(self, tp=tp)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(f"cuda:{self.local_rank}") if self.device == "cuda" else torch.device("cpu")


def init_runtime(local_rank_flag: int = -1, num_threads: int = 0) -> Runtime:
    """Initialise torch.distributed through DeepSpeed; single-process runs get a world of 1."""
    if "RANK" not in os.environ:  # not launched by torchrun/deepspeed/Ray: a world of one on loopback
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port("127.0.0.1")),
        )
    if local_rank_flag >= 0 and "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(local_rank_flag)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("LOCAL_SIZE", world)))
    if device == "cpu":
        # the cores this process may run on (taskset, a pinned Ray worker), not the machine's: more
        # OpenMP threads than cores spin against each other
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = num_threads or max(1, cores // max(1, local_world))
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    else:
        torch.cuda.set_device(local_rank)

    backend = "nccl" if device == "cuda" else "gloo"
    if not torch.distributed.is_initialized():
        rendezvous.init_process_group(backend)  # our store, bound to MASTER_ADDR alone
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)  # adopts the group
    return Runtime(rank, world, local_rank, local_world, device)
