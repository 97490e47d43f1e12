"""Place a stage's ranks on a Ray cluster, each rank running the stage's own CLI.

`--num_nodes x --num_gpus_per_node` ranks (OpenRLHF's names for a group's size) are Ray actors in
one placement group (`--placement_strategy`, PACK by default), one bundle each. The driver gives
every rank the torch.distributed environment torchrun would (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_*), numbering each node's ranks contiguously; the rank then runs exactly
what `torchrun` would run, opening its own process group (NCCL on GPUs, gloo on CPUs), so losses
match a `torchrun` run of the same config. The process that calls this holds no accelerator: on a
Ray job it is the job's driver, and only the ranks hold GPUs (or, on a CPU cluster, one CPU each).

Why not Ray Train's TorchTrainer (used until 2026-11-27): it starts seven actors per stage (its
controller, the worker, a synchronization actor, a placement-group cleaner, an autoscaling
coordinator, a dataset manager, a preemption watcher), each a new Python process importing Ray,
most of them one after the other. A one-rank, two-step SFT job took 26-34 s with it and 11-13 s
with these actors on a 2-core machine (docs/benchmarks.md, "Orchestration"); what it adds here
(elastic restarts, Ray Data shards) no stage uses: a failed rank fails the job, and the stage's retry
resumes from the last committed checkpoint. The PPO groups place their ranks the same way.

Which path a CLI takes (`on_ray`): under `torchrun`/`deepspeed` (RANK set) it is one of the
launcher's ranks; otherwise, when it runs as a Ray job (RAY_ADDRESS set, as every pipeline stage
does) or asks for more than one rank, it places its ranks on Ray; otherwise it trains in-process.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Callable

import ray

import alignment
from alignment import lease
from alignment.config.base import ConfigError
from alignment.config.runs import Ranks, RanksConfig
from alignment.distributed import cluster
from alignment.distributed.cluster import Ask, GroupPlan
from alignment.distributed.rank_actor import RankActor, rank_environments
from alignment.distributed.side_groups import NAMESPACE, SideGroup, env_name, replica_names
from alignment.errors import TransientError, UserError

log = logging.getLogger(__name__)


def world_size(cfg: RanksConfig) -> int:
    return cfg.world_size()


def on_ray(cfg: RanksConfig, side: SideGroup | None = None) -> bool:
    """True when this process should place the ranks on Ray rather than train itself (a side group is
    placed on Ray, so it asks for Ray too)."""
    if side is not None and "RANK" in os.environ and not os.environ.get(env_name(side.role)):
        raise ConfigError(
            f"{side.flags()}: a {side.role} on its own Ray group is placed by alignflow, not by torchrun or "
            f"deepspeed: run the command without the launcher, or drop --{side.role}_num_nodes"
        )
    if "RANK" in os.environ:  # a rank already: started by torchrun, deepspeed or run_ranks
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size(cfg) not in (1, launched):
            raise ConfigError(
                f"{cfg.ranks_flags()} = {world_size(cfg)} ranks, but the launcher started {launched}: "
                f"under torchrun/deepspeed the launcher sets the world size; drop the flags or make "
                f"them match"
            )
        return False
    return world_size(cfg) > 1 or side is not None or bool(os.environ.get("RAY_ADDRESS"))


def rank_group(ranks: Ranks) -> GroupPlan:
    """The stage's ranks as one group of the placement layer, and how they were asked for."""
    return GroupPlan("ranks", ranks.num_nodes, ranks.num_gpus_per_node, "ranks")


def ask(cfg: RanksConfig, side: SideGroup | None = None) -> Ask:
    if side is None:
        return Ask(f"{cfg.ranks_flags()} = {world_size(cfg)} ranks", "rank", "use fewer ranks or add nodes")
    what = f"{cfg.ranks_flags()} = {world_size(cfg)} ranks and {side.flags()} = {side.replicas} {side.role} replicas"
    return Ask(what, "rank or replica", "use fewer ranks or replicas, or add nodes")


def check_resources(cfg: RanksConfig, total: dict[str, float]) -> tuple[bool, dict[str, float]]:
    """(use GPUs, resources of one rank), or one ConfigError naming what the cluster lacks. A rank takes a GPU
    and a CPU on a GPU cluster, one CPU on a CPU-only cluster (the placement layer's one check)."""
    return cluster.check_resources([rank_group(cfg.ranks)], total, ask(cfg), cfg.ranks.accelerator_type)


def _user_error(err: BaseException) -> BaseException | None:
    """The ConfigError/DataError/... (exit 2) or transient fault (exit 75) a rank raised, if that is
    why the run failed: the driver re-raises it, so the job's exit status says so (not a crash)."""
    known = (UserError, TransientError)
    seen: list[BaseException] = [err]
    while seen:
        e = seen.pop()
        cause = getattr(e, "cause", None)  # RayTaskError carries the rank's exception here
        if isinstance(cause, known):
            return cause
        if isinstance(e, known):
            return e
        seen += [x for x in (e.__cause__, cause) if x is not None]
    return None


class StageRank(RankActor):
    """One rank of a stage: a Ray actor in the stage's placement group (wrapped with `ray.remote` by
    run_ranks, so this module imports without Ray)."""

    def run(self, env: dict[str, str], config: dict) -> None:
        self.become_rank(env)
        _rank_main(config)


def _rank_main(config: dict) -> None:
    """One rank (in a StageRank actor): log where it runs, then the CLI's own main."""

    if os.path.isdir(
        config["cwd"]
    ):  # relative paths mean what they meant to the user (shared or same-path file systems)
        os.chdir(config["cwd"])
    # every rank says where it landed (the job log shows whether SPREAD spread the ranks) and at which
    # priority it computes (unniced: nice 0)
    print(
        f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on Ray node "
        f"{ray.get_runtime_context().get_node_id()}, nice {os.nice(0)}",
        flush=True,
    )
    config["main"](config["argv"])


def run_ranks(
    main: Callable[[list[str] | None], object],
    argv: list[str] | None,
    cfg: RanksConfig,
    name: str,
    side: SideGroup | None = None,
) -> dict:
    """Run `main(argv)` on `world_size(cfg)` Ray ranks; returns after the last rank finished.
    A rank's input error is re-raised here (exit 2); any other rank failure fails the run at once.
    `side`: a group of replicas placed with the ranks, which the ranks ask (alignment/distributed/side_groups.py)."""

    argv = list(sys.argv[1:] if argv is None else argv)
    group = rank_group(cfg.ranks)
    groups = [group] + ([GroupPlan(side.role, side.nodes, side.per_node, side.role)] if side else [])
    placed = cluster.place(groups, ask(cfg, side), name, cfg.ranks.placement_strategy, cfg.ranks.accelerator_type)
    log.info("%s: code from %s, working directory %s", name, Path(alignment.__file__).parent, os.getcwd())
    ranks = [placed.actor(StageRank, group, k).remote() for k in range(group.world_size)]
    shared = lease.shared_env()  # the ranks share our leases
    if side is not None:  # started now; each loads while the ranks start, and a rank's first ask waits for it
        names = replica_names(side, name)
        ranks += [
            placed.actor(side.server, groups[1], k, name=n, namespace=NAMESPACE).remote(**side.kwargs)
            for k, n in enumerate(names)
        ]
        shared[env_name(side.role)] = ",".join(names)
        log.info("%s: %s on its own Ray group: %s", name, side.role, side.flags())
    try:
        stage = ranks[: group.world_size]
        config = {"main": main, "argv": argv, "cwd": os.getcwd()}
        pending = [r.run.remote({**e, **shared}, config) for r, e in zip(stage, rank_environments(stage))]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)  # a failed rank raises now, not when the others (waiting at a collective) would return
    except Exception as e:
        user = _user_error(e)
        if user is not None:
            raise user from None
        raise
    finally:
        for r in ranks:  # the others of a failed run wait at a collective forever (and the replicas serve)
            ray.kill(r)
        placed.remove()
    return {}
