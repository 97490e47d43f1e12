"""A model a stage's ranks ask rather than hold: a Ray group of replicas placed beside the ranks (a
distillation's teacher with `--teacher_num_nodes`). It is placed with the ranks, in the same resource check
(alignment/distributed/cluster.py); each replica is a named Ray actor, and each rank finds its replica by
name (rank r asks replica r mod n) through an environment variable, the way it finds its torch.distributed
peers: `ALIGNFLOW_<ROLE>_ACTORS`.

Why replicas and not one sharded model: a frozen model that serves forward passes needs no collective, so
n copies serve n ranks without waiting on each other. What it costs: the answer travels (a teacher's
[B, T, V] logits per micro-batch through Ray's object store) where a rank-local copy hands it over in
memory; the group pays off when the teacher does not fit beside the student.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray

if TYPE_CHECKING:
    from ray.actor import ActorHandle

NAMESPACE = "alignflow-side"  # Ray namespace of the replicas' names (the ranks look them up there)


@dataclass(frozen=True)
class SideGroup:
    role: str  # "teacher": the flags' prefix and the environment variable's name
    nodes: int
    per_node: int
    server: type  # the replica's class (started with `kwargs` on its bundle)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.nodes * self.per_node

    def flags(self) -> str:
        return f"--{self.role}_num_nodes {self.nodes} x --{self.role}_num_gpus_per_node {self.per_node}"


def env_name(role: str) -> str:
    return f"ALIGNFLOW_{role.upper()}_ACTORS"


def replica_names(side: SideGroup, run: str) -> list[str]:
    tag = uuid.uuid4().hex[:8]  # two runs on one cluster never share a name
    return [f"{run}-{side.role}-{tag}-{k}" for k in range(side.replicas)]


def my_replica(role: str) -> ActorHandle | None:
    """In a rank: the handle of the replica this rank asks, or None when the stage has no such group."""
    names = [n for n in os.environ.get(env_name(role), "").split(",") if n]
    if not names:
        return None

    return ray.get_actor(names[int(os.environ.get("RANK", "0")) % len(names)], namespace=NAMESPACE)
