"""Where PPO's model groups live (OpenRLHF's --actor_num_nodes, --colocate_all_models, ...). On a CPU-only
cluster a "gpu" is one CPU bundle."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from alignment.config.base import opt, require


@dataclass(frozen=True)
class PlacementActor:
    """`actor` settings; PlacementConfig checks them."""

    num_nodes: int = opt(1, "Nodes for the policy (actor) group", dotted="actor.num_nodes", flat="actor_num_nodes")
    num_gpus_per_node: int = opt(
        1,
        "Ranks (GPUs, or CPU bundles) per node for the actor",
        dotted="actor.num_gpus_per_node",
        flat="actor_num_gpus_per_node",
    )


@dataclass(frozen=True)
class PlacementCritic:
    """`critic` settings; PlacementConfig checks them."""

    num_nodes: int = opt(1, "Nodes for the critic group", dotted="critic.num_nodes", flat="critic_num_nodes")
    num_gpus_per_node: int = opt(
        1, "Ranks per node for the critic", dotted="critic.num_gpus_per_node", flat="critic_num_gpus_per_node"
    )


@dataclass(frozen=True)
class PlacementRef:
    """`ref` settings; PlacementConfig checks them."""

    num_nodes: int = opt(1, "Nodes for the reference group", dotted="ref.num_nodes", flat="ref_num_nodes")
    num_gpus_per_node: int = opt(
        1, "Ranks per node for the reference", dotted="ref.num_gpus_per_node", flat="ref_num_gpus_per_node"
    )
    ref_reward_offload: bool = opt(
        False,
        "Keep reference and reward models in CPU memory between uses (OpenRLHF's --ref.offload and "
        "--reward.offload each turn on this one switch)",
        dotted={"ppo": ("ref.offload", "reward.offload")},
    )


@dataclass(frozen=True)
class PlacementReward:
    """`reward` settings; PlacementConfig checks them."""

    num_nodes: int = opt(1, "Nodes for the reward-model group", dotted="reward.num_nodes", flat="reward_num_nodes")
    num_gpus_per_node: int = opt(
        1, "Ranks per node for the reward model(s)", dotted="reward.num_gpus_per_node", flat="reward_num_gpus_per_node"
    )


@dataclass(frozen=True)
class PlacementTrain:
    """`train` settings; PlacementConfig checks them."""

    colocate_actor_ref: bool = opt(
        False, "Place actor and reference ranks on the same bundles", dotted="train.colocate_actor_ref"
    )
    colocate_critic_reward: bool = opt(
        False, "Place critic and reward-model ranks on the same bundles", dotted="train.colocate_critic_reward"
    )
    colocate_all: bool = opt(
        False,
        "Place every model group and the rollout engines on the same bundles",
        dotted="train.colocate_all",
        flat="colocate_all_models",
    )


class Role(str, Enum):
    """PPO's model groups: OpenRLHF's --actor.*, --critic.*, --ref.*, --reward.* flags, each its own Ray actors."""

    ACTOR = "actor"
    CRITIC = "critic"
    REF = "ref"
    REWARD = "reward"

    def __str__(self) -> str:  # "actor" in messages and f-strings, on every Python version
        return self.value


# the roles DeepSpeed trains: --ds_tensor_parallel_size shards their layers (ref and reward hold whole copies)
TRAINED = (Role.ACTOR, Role.CRITIC)


class Placed(Protocol):
    """What every role's group says about its ranks."""

    num_nodes: int
    num_gpus_per_node: int


class PlacementConfig:
    """Where the four model groups live. On a CPU-only cluster a "gpu" is one CPU bundle."""

    @property
    def roles(self) -> dict[Role, Placed]:
        """Each role's group (`cfg.roles[Role.CRITIC].num_nodes` is --critic.num_nodes)."""
        return {role: getattr(self, role.value) for role in Role}

    def placed_roles(self) -> list[Role]:
        """The model groups a run places (PPOConfig knows which its estimator and reward need)."""
        return list(Role)

    def check_placement(self) -> None:
        for name, group in self.roles.items():
            nodes, per_node = group.num_nodes, group.num_gpus_per_node
            require(
                nodes >= 1 and per_node >= 1,
                f"--{name}_num_nodes {nodes} / --{name}_num_gpus_per_node {per_node}: both must be >= 1",
            )
        placed = self.placed_roles()
        pairs = []
        if self.train.colocate_all:
            pairs = [(Role.ACTOR, other) for other in (Role.CRITIC, Role.REF, Role.REWARD)]
        else:
            if self.train.colocate_actor_ref:
                pairs.append((Role.ACTOR, Role.REF))
            if self.train.colocate_critic_reward:
                pairs.append((Role.CRITIC, Role.REWARD))
        # a group the run does not place has no bundles to share: OpenRLHF's GRPO lines leave the critic's
        # sizes at their defaults beside --colocate_all_models
        shape = {role: (group.num_nodes, group.num_gpus_per_node) for role, group in self.roles.items()}
        for a, b in [(a, b) for a, b in pairs if a in placed and b in placed]:
            flag = "--colocate_all_models" if self.train.colocate_all else f"--colocate_{a}_{b}"
            require(
                shape[a] == shape[b],
                f"{flag}: {a} has {shape[a][0]}x{shape[a][1]} ranks but {b} has {shape[b][0]}x{shape[b][1]}; "
                f"colocated groups share bundles, so give them the same --*_num_nodes and --*_num_gpus_per_node",
            )
