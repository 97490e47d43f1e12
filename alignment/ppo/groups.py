"""One model role's Ray actors: one `ModelWorker` per rank, on its placement group's bundles
(alignment/distributed/cluster.py). `call(ModelWorker.method, ...)` sends a call to the ranks as the
method's `@dispatch` mode declares (alignment/ppo/dispatch.py), so a reader follows the driver's call to
the worker's method."""

from __future__ import annotations

from typing import Any, Callable

import ray

from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import GroupPlan, Placed
from alignment.ppo.dispatch import Joined
from alignment.ppo.workers import ModelWorker

# the roles DeepSpeed trains: --ds_tensor_parallel_size shards their layers (ref and reward hold whole copies)
TRAINED = ("actor", "critic")


class ModelGroup:
    def __init__(self, plan: GroupPlan, placed: Placed, tp: int = 1):
        """`tp`: --ds_tensor_parallel_size for a trained role; `tp` consecutive ranks form one replica."""
        self.plan, self.tp = plan, tp
        self.workers = [placed.actor(ModelWorker, plan, i).remote() for i in range(plan.world_size)]

    def init(self, cfg: PPOConfig, threads: int, total_steps: int, cores: list[int] | None) -> list:
        """Each rank joins the group's process group (rank 0's address) and builds its role's model."""
        master = ray.get(self.workers[0].address.remote())
        n = len(self.workers)
        return [
            w.init.remote(self.plan.role, cfg, r, n, self.plan.per_node, master, threads, total_steps, cores)
            for r, w in enumerate(self.workers)
        ]

    def call(self, method: Callable, *args: Any) -> Joined:
        """`method` (a ModelWorker method) on every rank, its arguments scattered and its results joined as
        its `@dispatch` mode says; started, not awaited."""
        mode, name = method.dispatch, method.__name__  # type: ignore[attr-defined]
        if mode.scatter is None:
            return Joined([getattr(w, name).remote(*args) for w in self.workers], mode.join)
        # a tensor-parallel replica's ranks take the same share together; its first rank's result is the share's
        shares = mode.scatter(args, len(self.workers) // self.tp)
        futures = [getattr(w, name).remote(*shares[r // self.tp]) for r, w in enumerate(self.workers)]
        return Joined(futures, lambda results: mode.join(results[:: self.tp]))
