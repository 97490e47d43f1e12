"""Where PPO's model groups live (OpenRLHF's --actor_num_nodes, --colocate_all_models, ...). On a CPU-only
cluster a "gpu" is one CPU bundle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from alignment.config.base import opt, require


@dataclass
class PlacementConfig:
    """Where the four model groups live. On a CPU-only cluster a "gpu" is one CPU bundle."""

    own_group: ClassVar[str] = "ref"

    actor_num_nodes: int = opt(1, "Nodes for the policy (actor) group", dotted="actor.num_nodes")
    actor_num_gpus_per_node: int = opt(
        1, "Ranks (GPUs, or CPU bundles) per node for the actor", dotted="actor.num_gpus_per_node"
    )
    critic_num_nodes: int = opt(1, "Nodes for the critic group", dotted="critic.num_nodes")
    critic_num_gpus_per_node: int = opt(1, "Ranks per node for the critic", dotted="critic.num_gpus_per_node")
    ref_num_nodes: int = opt(1, "Nodes for the reference group", dotted="ref.num_nodes")
    ref_num_gpus_per_node: int = opt(1, "Ranks per node for the reference", dotted="ref.num_gpus_per_node")
    reward_num_nodes: int = opt(1, "Nodes for the reward-model group", dotted="reward.num_nodes")
    reward_num_gpus_per_node: int = opt(1, "Ranks per node for the reward model(s)", dotted="reward.num_gpus_per_node")
    colocate_actor_ref: bool = opt(
        False, "Place actor and reference ranks on the same bundles", dotted="train.colocate_actor_ref"
    )
    colocate_critic_reward: bool = opt(
        False, "Place critic and reward-model ranks on the same bundles", dotted="train.colocate_critic_reward"
    )
    colocate_all_models: bool = opt(
        False, "Place every model group and the rollout engines on the same bundles", dotted="train.colocate_all"
    )
    ref_reward_offload: bool = opt(
        False,
        "Keep reference and reward models in CPU memory between uses (OpenRLHF's --ref.offload and "
        "--reward.offload each turn on this one switch)",
        dotted={"ppo": ("ref.offload", "reward.offload")},
    )

    def _group(self, name: str) -> tuple[int, int]:
        return getattr(self, f"{name}_num_nodes"), getattr(self, f"{name}_num_gpus_per_node")

    def placed_roles(self) -> list[str]:
        """The model groups a run places (PPOConfig knows which its estimator and reward need)."""
        return ["actor", "critic", "ref", "reward"]

    def check_placement(self) -> None:
        for name in ("actor", "critic", "ref", "reward"):
            nodes, per_node = self._group(name)
            require(
                nodes >= 1 and per_node >= 1,
                f"--{name}_num_nodes {nodes} / --{name}_num_gpus_per_node {per_node}: both must be >= 1",
            )
        placed = self.placed_roles()
        pairs = []
        if self.colocate_all_models:
            pairs = [("actor", other) for other in ("critic", "ref", "reward")]
        else:
            if self.colocate_actor_ref:
                pairs.append(("actor", "ref"))
            if self.colocate_critic_reward:
                pairs.append(("critic", "reward"))
        # a group the run does not place has no bundles to share: OpenRLHF's GRPO lines leave the critic's
        # sizes at their defaults beside --colocate_all_models
        for a, b in [(a, b) for a, b in pairs if a in placed and b in placed]:
            flag = "--colocate_all_models" if self.colocate_all_models else f"--colocate_{a}_{b}"
            require(
                self._group(a) == self._group(b),
                f"{flag}: {a} has {self._group(a)[0]}x{self._group(a)[1]} ranks but {b} has "
                f"{self._group(b)[0]}x{self._group(b)[1]}; colocated groups share bundles, so give them "
                f"the same --*_num_nodes and --*_num_gpus_per_node",
            )
