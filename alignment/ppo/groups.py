"""One model role's Ray actors (one `ModelWorker` per rank, in its placement group's bundles),
driven by typed calls: each method sends the same call to every rank (or each rank its shard of
the rows) and returns the futures, so a reader can follow the driver to the worker's method."""

from __future__ import annotations

from typing import Any

from alignment.config.ppo import PPOConfig
from alignment.distributed import placement
from alignment.ppo.batch import SequenceBatch
from alignment.ppo.experience import Experience


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        end = start + base + (k < extra)
        out.append((start, end))
        start = end
    return out


class ModelGroup:
    def __init__(self, plan: placement.GroupPlan, pg: Any, gpu: bool):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from alignment.distributed.ray_ranks import unniced
        from alignment.ppo.workers import ModelWorker

        remote = ray.remote(ModelWorker)
        self.plan, self.workers = (
            plan,
            [
                remote.options(
                    num_cpus=plan.share,
                    num_gpus=plan.share if gpu else 0,
                    runtime_env=unniced(),
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
                ).remote()
                for i in range(plan.world_size)
            ],
        )

    def init(self, cfg: PPOConfig, threads: int, total_steps: int, cores: list[int] | None) -> list:
        import ray

        master = ray.get(self.workers[0].address.remote())
        return [
            w.init.remote(
                self.plan.role, cfg, r, len(self.workers), self.plan.per_node, master, threads, total_steps, cores
            )
            for r, w in enumerate(self.workers)
        ]

    def _shards(self, batch: SequenceBatch) -> list[tuple[Any, SequenceBatch]]:
        return [
            (w, batch.rows(s, e)) for w, (s, e) in zip(self.workers, split(len(batch.prompt_index), len(self.workers)))
        ]

    def logprobs(self, batch: SequenceBatch) -> list:
        """Each rank's action log-probs of its contiguous shard of the rows."""
        return [w.logprobs.remote(part) for w, part in self._shards(batch)]

    def values(self, batch: SequenceBatch) -> list:
        return [w.values.remote(part) for w, part in self._shards(batch)]

    def train(self, exp: Experience, kl_coef: float, seed: int) -> list:
        """One training pass per rank on its equal share of the experience (metrics averaged across the group)."""
        return [w.train.remote(part, kl_coef, seed) for w, part in zip(self.workers, exp.shards(len(self.workers)))]

    def node_ids(self) -> list:
        return [w.node_id.remote() for w in self.workers]

    def prepare_sync(self) -> list:
        return [w.prepare_sync.remote() for w in self.workers]

    def weight_chunks(self, max_bytes: int) -> list:
        return [w.weight_chunks.remote(max_bytes) for w in self.workers]

    def save_checkpoint(self, ckpt_uri: str, iteration: int) -> list:
        return [w.save_checkpoint.remote(ckpt_uri, iteration) for w in self.workers]

    def upload_checkpoint(self, ckpt_uri: str, iteration: int, version: str) -> list:
        return [w.upload_checkpoint.remote(ckpt_uri, iteration, version) for w in self.workers]

    def load_checkpoint(self, ckpt_uri: str, name: str) -> list:
        return [w.load_checkpoint.remote(ckpt_uri, name) for w in self.workers]

    def commit(self, save_path: str, metadata: dict[str, Any], files: dict[str, bytes]) -> list:
        return [w.commit.remote(save_path, metadata, files) for w in self.workers]
