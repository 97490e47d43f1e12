"""The one way a Ray actor becomes a torch rank: a stage's rank (`ray_ranks.StageRank`) and a PPO model group's
rank (`ppo.workers.ModelWorker`) both derive from `RankActor`. The driver asks each actor where it landed, numbers
the ranks node by node (`rank_envs`: torchrun's RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, and on GPUs the
node's devices), takes rank 0's free port, and each actor sets that environment before its first
torch.distributed or CUDA call (`become_rank`), as a `torchrun` child would find it.

Only the driver side imports Ray at the top of its functions: the classes are wrapped with `ray.remote` by the
placement layer, so a module defining one imports without Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ray

from alignment.distributed.ports import free_port
from alignment.logs import setup_logging


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

    ip = ray.util.get_node_ip_address()
    return ip, free_port(ip)


class RankActor:
    """Base of every Ray actor that becomes a torch rank (wrapped with `ray.remote` by the placement layer)."""

    def landing(self) -> Landing:
        return Landing(
            ray.get_runtime_context().get_node_id(),
            ray.util.get_node_ip_address(),
            tuple(str(g) for g in ray.get_gpu_ids()),
        )

    def free_port(self) -> int:
        """Rank 0's becomes MASTER_PORT."""
        return node_address()[1]

    def become_rank(self, env: dict[str, str]) -> None:
        os.environ.update(env)  # before the first CUDA call: CUDA reads CUDA_VISIBLE_DEVICES once
        setup_logging(force=True)


def rank_environments(actors: list) -> list[dict[str, str]]:
    """Each of `actors`' (RankActor handles, in placement order) torch.distributed environment, MASTER_PORT
    included."""

    envs = rank_envs(ray.get([a.landing.remote() for a in actors]))
    port = ray.get(actors[next(k for k, e in enumerate(envs) if e["RANK"] == "0")].free_port.remote())
    return [{**e, "MASTER_PORT": str(port)} for e in envs]
