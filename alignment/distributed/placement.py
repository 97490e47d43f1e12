"""Where PPO's model groups go: which roles exist, which share bundles (colocation) and what fraction of a
bundle each rank asks for. Pure logic (no Ray), so the colocation rules are unit-testable; the placing
itself, and the one resource check, are alignment/distributed/cluster.py's, as for every stage.
Colocated roles share their bundles: each of k roles on a bundle asks for 1/k of it, so they land on
the same GPU (or core) as OpenRLHF's colocation does.
"""

from __future__ import annotations

from alignment.config.placement import Role
from alignment.config.ppo import PPOConfig
from alignment.distributed.cluster import Ask, GroupPlan


def plan(cfg: PPOConfig) -> list[GroupPlan]:
    """Model groups, then the vLLM engines (--vllm_num_engines, --vllm_tensor_parallel_size bundles each, on their
    own bundles unless --colocate_all_models)."""
    cfg.check_placement()
    roles = cfg.roles
    present: list[str] = [*cfg.placed_roles(), *(["vllm"] if cfg.vllm.num_engines > 0 else [])]
    shape = {r: (roles[r].num_nodes, roles[r].num_gpus_per_node) for r in present if r != "vllm"}
    if "vllm" in present:
        shape["vllm"] = (1, cfg.vllm.num_engines * cfg.vllm.tensor_parallel_size)
    if cfg.train.colocate_all:
        sets = {r: "all" for r in present}
    else:
        sets = {r: r for r in present}
        if cfg.train.colocate_actor_ref:
            sets[Role.REF] = Role.ACTOR
        if cfg.train.colocate_critic_reward and Role.CRITIC in present and Role.REWARD in present:
            sets[Role.REWARD] = Role.CRITIC
    members = {s: [r for r in present if sets[r] == s] for s in set(sets.values())}
    return [GroupPlan(r, *shape[r], sets[r], 1.0 / len(members[sets[r]])) for r in present]


def ask(groups: list[GroupPlan]) -> Ask:
    """How PPO's layout reads in the one message when the cluster cannot hold it."""
    layout = ", ".join(
        f"{g.role} {g.nodes}x{g.per_node}" + (f" (shares with {g.bundle_set})" if g.bundle_set != g.role else "")
        for g in groups
    )
    return Ask(
        f"the model groups ({layout})",
        "bundle",
        "colocate groups (--colocate_actor_ref, --colocate_critic_reward, --colocate_all_models), "
        "use fewer ranks, or add nodes",
    )
