"""Ray model workers: one process per rank of a model group (actor, critic, ref, reward). The
ranks of a group form their own torch.distributed group (gloo on CPU, NCCL on GPU) and run the
same `rank_ops` code as PPO without Ray; the driver's controller (`alignment.ppo.controller`, through
`alignment.ppo.ray_driver.RayGroups`) tells them what to do and moves tensors between groups through Ray's object store.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist

from alignment.config.placement import TRAINED, Role
from alignment.config.ppo import PPOConfig
from alignment.datasets.images import processor_of
from alignment.distributed.collectives import mean_across_ranks
from alignment.distributed.rank_actor import RankActor
from alignment.distributed.runtime import init_runtime
from alignment.models.builder import prepare
from alignment.models.moe import moe_top_k
from alignment.models.reward_model import ValueCapture
from alignment.models.saving import (
    commit_model,
    lora_save,
    policy_weights,
    save_hf_copy,
    save_hf_model,
    save_value_model,
)
from alignment.outputs import StagedOutput
from alignment.ppo import rank_ops, roles
from alignment.ppo.batch import SequenceBatch
from alignment.ppo.dispatch import EACH, EXPERIENCE, LISTS, PROMPTS, ROWS, dispatch
from alignment.ppo.ema import EMA
from alignment.ppo.experience import Experience
from alignment.ppo.packed import packing_for
from alignment.ppo.sleep import OptimizerSleep
from alignment.rewards.scorer import Scored
from alignment.rollout.collective_sync import SyncGroup, broadcast, listen, open_group, specs
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import Rollout, SamplingParams
from alignment.rollout.vllm_engine import VLLMEngine
from alignment.rollout.weight_sync import chunks
from alignment.training import checkpoint, finite
from alignment.training.resume_point import check_world_size

log = logging.getLogger(__name__)


class ModelWorker(RankActor):
    """Wrapped with `ray.remote` by the driver (so this module imports without Ray)."""

    def init(
        self,
        role: str,
        cfg: PPOConfig,
        env: dict[str, str],
        threads: int,
        total_steps: int,
        cores: list[int] | None = None,
    ) -> None:
        """`env`: this rank's torch.distributed environment (rank_actor.rank_environments)."""
        self.become_rank({**env, "OMP_WAIT_POLICY": "PASSIVE"})  # idle ranks of other groups must not spin
        rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        if cores:  # keep off the cores vLLM engines bound (cluster.split_cores)
            os.sched_setaffinity(0, set(cores))
            threads = min(threads, len(cores))
        if not cfg.train.num_threads:
            # the driver divides the node's CPUs as Ray counts them; this process may run on fewer (a taskset or
            # a cpuset), and more threads than its cores only wait on each other (the README's PPO job on a 2-CPU
            # head pinned to one core: 164 s at 1 thread a rank, 170 s at 2)
            threads = min(threads, len(os.sched_getaffinity(0)))

        self.role, self.cfg = role, cfg
        self.rt = init_runtime(-1, threads)
        if role in TRAINED:  # DeepSpeed AutoTP shards these
            self.rt = self.rt.tensor_parallel(cfg.ds.tensor_parallel_size)
        if cfg.ckpt.load_enable:  # before any weights load
            check_world_size(cfg.ckpt.path, self.rt.world_size)
        self.setup = setup = prepare(cfg, self.rt)
        self.packing = packing_for(cfg.ds, setup)
        if role == Role.ACTOR:
            self.moe_top_k = moe_top_k(setup.path, cfg.model.aux_loss_coef, setup.trust_remote_code)
            self.engine = roles.actor(cfg, self.rt, setup, total_steps)
            self.model = self.engine.module
            self.ema = EMA(self.model, cfg.train.ema_beta) if cfg.train.enable_ema else None
        elif role == Role.CRITIC:
            self.engine, scale = roles.critic(cfg, self.rt, setup, total_steps)
            self.model = self.engine.module
            self.capture = ValueCapture(self.model, scale)
        elif role == Role.REF:
            self.model = roles.reference(cfg.ref, setup, self.rt.torch_device)
        elif role == Role.REWARD:
            self.reward = roles.reward(cfg, setup, self.rt.torch_device)
        else:
            raise ValueError(f"unknown model role {role!r}")

        self.sleep = OptimizerSleep(
            self.engine if role in TRAINED else None,
            cfg.ds.enable_sleep and role in TRAINED,
            self.rt.torch_device.type,
            role,
        )
        log.info("%s rank %d/%d ready (%d threads)", role, rank, world_size, threads)

    # --- inference ---------------------------------------------------------------------
    @dispatch(EACH)
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    @dispatch(PROMPTS)  # the vLLM engines' generate (alignment/rollout/vllm_engine.py) is called the same way
    def generate(self, prompt_ids: list[list[int]], params: SamplingParams, images: list | None = None) -> Rollout:
        tok = self.setup.tokenizer
        engine = HFEngine(
            self.model,
            tok.eos_token_id,
            tok.pad_token_id,
            batch_size=max(self.cfg.rollout.micro_batch_size, 1),
            device=self.rt.torch_device,
            processor=processor_of(tok),
        )
        return engine.generate(prompt_ids, params, images)

    @dispatch(ROWS)
    def logprobs(self, batch: SequenceBatch) -> torch.Tensor:
        return rank_ops.logprobs(self.model, batch, self.cfg, self.packing)

    @dispatch(ROWS)
    def values(self, batch: SequenceBatch) -> torch.Tensor:
        return rank_ops.values(self.model, self.capture, batch, self.cfg, self.packing)

    @dispatch(LISTS)
    def scores(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        return self.reward(queries, prompts, labels)

    # --- training ----------------------------------------------------------------------
    @dispatch(EXPERIENCE)
    def train(self, exp: Experience, kl_coef: float, seed: int) -> dict[str, float]:
        with self.sleep.awake():
            if self.role == Role.CRITIC:
                stats = rank_ops.train_critic(self.engine, self.capture, exp, self.cfg, seed, self.packing)
            else:
                stats = rank_ops.train_actor(
                    self.engine, exp, self.cfg, kl_coef, seed, self.packing, self.ema, self.moe_top_k
                )
        return mean_across_ranks(stats)

    @dispatch(EACH)
    def weight_chunks(self, max_bytes: int) -> list:
        """The policy's weights as object-store chunks (refs) for the rollout engines; every rank
        calls (ZeRO-3 gathers collectively), rank 0 returns the refs."""

        state = policy_weights(self.engine)
        return [] if state is None else [ray.put(part) for part in chunks(state, max_bytes)]

    # --- collective weight sync to vLLM engines (rank 0 is the broadcast's root) ----------
    def sync_group_address(self, world_size: int) -> tuple[str, int]:
        """Open the group's store here (the OS picks its port) and say where it listens."""

        host = ray.util.get_node_ip_address()
        self._sync_store = listen(host, world_size)
        return host, self._sync_store.port

    def join_sync_group(self, group: SyncGroup) -> bool:
        self._sync_pg = open_group(group, 0, self._sync_store)
        self._sync_device = self.rt.torch_device if group.backend == "nccl" else torch.device("cpu")
        return True

    @dispatch(EACH)
    def prepare_sync(self) -> list:
        """Every rank (ZeRO-3 gathers collectively); rank 0 keeps the weights, returns their specs."""

        self._sync_state = policy_weights(self.engine)
        return [] if self._sync_state is None else specs(self._sync_state)

    def broadcast_weights(self) -> int:
        state, self._sync_state = self._sync_state, None
        return broadcast(self._sync_pg, state, self._sync_device)

    @dispatch(EACH)
    def save_checkpoint(self, ckpt_uri: str, iteration: int) -> None:
        def actor_extra(role_dir):  # --save_hf_ckpt's HF copy, --enable_ema's average (collective)
            if self.cfg.ckpt.save_hf:
                save_hf_copy(
                    self.engine, self.setup.tokenizer, role_dir / "hf" if role_dir else None, lora=lora_save(self.cfg)
                )
            if self.ema is not None:
                self.ema.save(role_dir)

        with self.sleep.awake():
            # every rank of the group, before any saves: a NaN/Inf weight stops the run, nothing written
            finite.check_engines(
                {self.role: self.engine}, f"checkpoint {ckpt_uri}/{checkpoint.tag(iteration)}", iteration
            )
            checkpoint.save_engine(
                self.engine, ckpt_uri, iteration, self.role, actor_extra if self.role == Role.ACTOR else None
            )

    @dispatch(EACH)
    def upload_checkpoint(self, ckpt_uri: str, iteration: int, version: str) -> dict:
        return checkpoint.upload_role(ckpt_uri, iteration, self.role, version)

    @dispatch(EACH)
    def load_checkpoint(self, ckpt_uri: str, name: str) -> None:
        with self.sleep.awake():
            checkpoint.load_engine(self.engine, ckpt_uri, name, self.role)
        if self.role == Role.ACTOR and self.ema is not None:
            self.ema.load(checkpoint.role_dir(ckpt_uri, name, "actor"), self.model)

    @dispatch(EACH)
    def value_model_files(self) -> dict[str, bytes]:
        """--save_value_network: the critic as a reward-model folder, its files by name (rank 0's; the others'
        empty), for the actor group's commit to put under critic/. Collective."""

        with tempfile.TemporaryDirectory(prefix="alignflow-critic-") as tmp:
            out = Path(tmp) if self.rt.is_main else None
            save_value_model(self.engine, self.setup.tokenizer, out, self.cfg.ds.value_head_prefix)
            return {str(p.relative_to(tmp)): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()}

    @dispatch(EACH)
    def commit(self, save_path: str, metadata: dict[str, Any], files: dict[str, bytes]) -> None:
        """Save the model in HF format, with the driver's `files` (metrics), and commit it to the
        store: rank 0 writes, every rank calls (gathering ZeRO-3 shards is collective)."""

        # the old committed model stays intact until the commit
        with StagedOutput(save_path, writes=self.rt.is_main) as out:
            for name, data in files.items() if out.dir is not None else ():
                (out.dir / name).parent.mkdir(parents=True, exist_ok=True)
                (out.dir / name).write_bytes(data)
            if self.role == Role.ACTOR and self.ema is not None and out.dir is not None:  # beside the actor
                save_hf_model(
                    self.model,
                    self.ema.state_dict(self.model),
                    self.setup.tokenizer,
                    out.dir / "ema",
                    lora=lora_save(self.cfg),
                )
            commit_model(out, self.engine, self.setup.tokenizer, metadata, lora=lora_save(self.cfg), cfg=self.cfg)
        dist.barrier()


def vllm_engine_actor() -> type:
    """The vLLM engine as a Ray actor class (built lazily: importing this module needs no vLLM)."""

    class VLLMEngineActor(VLLMEngine):
        def load_weight_refs(self, refs: list) -> int:
            if self.turns is not None:  # --partial_rollout_enable: now, or between the running generation's steps
                return int(self.turns.post(ray.get(refs)))
            return self.load_weight_chunks(ray.get(ref) for ref in refs)  # one chunk fetched at a time

    return VLLMEngineActor
