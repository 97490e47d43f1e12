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
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import alignment
from alignment import lease
from alignment.config.base import ConfigError
from alignment.config.runs import RanksConfig
from alignment.distributed import cluster
from alignment.distributed.cluster import Ask, GroupPlan
from alignment.distributed.side_groups import NAMESPACE, SideGroup, env_name, replica_names
from alignment.errors import TransientError, UserError
from alignment.logs import setup_logging

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


def rank_group(ranks: Any) -> GroupPlan:
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


@dataclass(frozen=True)
class Landing:
    """Where a rank's actor landed: its Ray node, that node's IP, the GPUs Ray gave it."""

    node: str
    ip: str
    gpus: tuple[str, ...] = ()


def rank_envs(landings: list[Landing]) -> list[dict[str, str]]:
    """The torch.distributed environment of each actor (in placement order), MASTER_PORT aside.
    Ranks are numbered node by node (nodes in order of first appearance), so a node's ranks are
    contiguous, as under torchrun, the deepspeed launcher and Ray Train: RANK - LOCAL_RANK names a
    node (checkpoint staging) and LOCAL_RANK 0 does a node's once-only work (the tokenized cache,
    the node's upload). On GPUs every rank of a node sees that node's GPUs of this stage, and
    LOCAL_RANK picks its own among them, so NCCL can go peer to peer between them."""
    nodes = list(dict.fromkeys(x.node for x in landings))
    visible = {
        n: sorted({g for x in landings if x.node == n for g in x.gpus}, key=lambda g: (len(g), g)) for n in nodes
    }

    def place(i: int) -> tuple[int, int]:  # node, then its GPU's position among the node's (placement order on CPUs)
        x = landings[i]
        return nodes.index(x.node), visible[x.node].index(x.gpus[0]) if x.gpus else i

    order = sorted(range(len(landings)), key=place)
    envs: list[dict[str, str]] = [{} for _ in landings]
    for rank, i in enumerate(order):
        same = [j for j in order if landings[j].node == landings[i].node]
        envs[i] = dict(
            RANK=str(rank),
            WORLD_SIZE=str(len(landings)),
            LOCAL_RANK=str(same.index(i)),
            LOCAL_WORLD_SIZE=str(len(same)),
            MASTER_ADDR=landings[order[0]].ip,
        )
        if landings[i].gpus:  # LOCAL_RANK is then also the rank's GPU among CUDA_VISIBLE_DEVICES
            envs[i]["CUDA_VISIBLE_DEVICES"] = ",".join(visible[landings[i].node])
    return envs


def node_address() -> tuple[str, int]:
    """In a Ray actor: this node's IP and a free port on it (a group's MASTER_ADDR/PORT when the
    actor is its rank 0; the process group binds the port moments later)."""
    import ray

    ip = ray.util.get_node_ip_address()
    return ip, free_port(ip)


# Ray's own ports are below this (its worker ports default to 10002-19999)
_LOWEST = 20000


def free_port(ip: str, ephemeral_low: int | None = None) -> int:
    """A port free on `ip` now, chosen below the kernel's ephemeral range. Between this check and the
    process group's bind, a port from that range can become the local port of any outgoing
    connection (a Ray node makes many): a chaos run of 2026-11-28 lost a retry to EADDRINUSE so.
    A port outside the range is only taken by an explicit bind. Where the range leaves no room
    below it, any free port."""
    import random

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


class StageRank:
    """One rank of a stage: a Ray actor in the stage's placement group (wrapped with `ray.remote` by
    run_ranks, so this module imports without Ray)."""

    def landing(self) -> Landing:
        import ray

        return Landing(
            ray.get_runtime_context().get_node_id(),
            ray.util.get_node_ip_address(),
            tuple(str(g) for g in ray.get_gpu_ids()),
        )

    def free_port(self) -> int:
        """Rank 0's becomes MASTER_PORT."""
        return node_address()[1]

    def run(self, env: dict[str, str], config: dict) -> None:
        os.environ.update(env)  # before the CLI's first CUDA call: CUDA reads CUDA_VISIBLE_DEVICES once
        _rank_main(config)


def _rank_main(config: dict) -> None:
    """One rank (in a StageRank actor): log where it runs, then the CLI's own main."""
    import ray

    setup_logging(force=True)
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
    main: Callable[[list[str] | None], Any],
    argv: list[str] | None,
    cfg: RanksConfig,
    name: str,
    side: SideGroup | None = None,
) -> dict:
    """Run `main(argv)` on `world_size(cfg)` Ray ranks; returns after the last rank finished.
    A rank's input error is re-raised here (exit 2); any other rank failure fails the run at once.
    `side`: a group of replicas placed with the ranks, which the ranks ask (alignment/distributed/side_groups.py)."""
    import sys

    import ray

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
        envs = rank_envs(ray.get([r.landing.remote() for r in stage]))
        port = ray.get(stage[next(k for k, e in enumerate(envs) if e["RANK"] == "0")].free_port.remote())
        config = {"main": main, "argv": argv, "cwd": os.getcwd()}
        shared["MASTER_PORT"] = str(port)
        pending = [r.run.remote({**e, **shared}, config) for r, e in zip(stage, envs)]
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
