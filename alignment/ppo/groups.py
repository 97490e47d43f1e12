"""One model role's Ray actors: one `ModelWorker` per rank, on its placement group's bundles
(alignment/distributed/cluster.py). `call(ModelWorker.method, ...)` sends a call to the ranks as the
method's `@dispatch` mode declares (alignment/ppo/dispatch.py), so a reader follows the driver's call to
the worker's method."""

from __future__ import annotations

from typing import Any, Callable

from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import GroupPlan, Placed
from alignment.distributed.rank_actor import rank_environments
from alignment.ppo.dispatch import Joined, call
from alignment.ppo.workers import ModelWorker


class ModelGroup:
    def __init__(self, plan: GroupPlan, placed: Placed, tp: int = 1):
        """`tp`: --ds_tensor_parallel_size for a trained role; `tp` consecutive ranks form one replica."""
        self.plan, self.tp = plan, tp
        self.workers = [placed.actor(ModelWorker, plan, i).remote() for i in range(plan.world_size)]

    def init(self, cfg: PPOConfig, threads: int, total_steps: int, cores: list[int] | None) -> list:
        """Each rank joins the group's process group, numbered as a stage's ranks are (node by node), and builds
        its role's model. The workers are then kept in rank order: a call's shares go to ranks in order, and a
        tensor-parallel replica is `tp` consecutive ranks."""
        envs = rank_environments(self.workers)
        order = sorted(range(len(envs)), key=lambda k: int(envs[k]["RANK"]))
        self.workers = [self.workers[k] for k in order]
        return [
            w.init.remote(self.plan.role, cfg, envs[k], threads, total_steps, cores)
            for w, k in zip(self.workers, order)
        ]

    def call(self, method: Callable, *args: Any) -> Joined:
        """`method` (a ModelWorker method) on every rank, as its `@dispatch` mode says; started, not awaited."""
        return call(self.workers, self.tp, method, *args)
