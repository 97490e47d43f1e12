"""PPO's in-process backend of `alignment.ppo.controller.ModelGroups`: every model in this process,
on each of the launcher's ranks (`train_ppo` under deepspeed/torchrun), HF generation on the actor's
own module — so after each update the engine already has the new weights and `sync_weights` has
nothing to do. The per-model work is `alignment.ppo.rank_ops`, the same code the Ray workers run.

Models: `actor` and `critic` are DeepSpeed engines (critic None for the critic-free estimators),
`ref` a frozen causal LM, `reward` any callable (queries, prompts, labels) -> [B] tensor.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from alignment.config.base import public_dict
from alignment.config.ppo import PPOConfig
from alignment.datasets.images import PromptImages, processor_of
from alignment.distributed.collectives import barrier
from alignment.distributed.runtime import Runtime
from alignment.models.reward_model import ValueCapture
from alignment.models.saving import commit_model, lora_save, save_hf_copy, save_hf_model, save_value_model
from alignment.outputs import StagedOutput
from alignment.ppo import rank_ops
from alignment.ppo.batch import SequenceBatch
from alignment.ppo.ema import EMA
from alignment.ppo.experience import Experience
from alignment.ppo.loop import PPOState, resume_state
from alignment.ppo.packed import Packing
from alignment.ppo.pending import Done
from alignment.ppo.run import Staging
from alignment.ppo.schedule import sampling_params, turn_params
from alignment.rewards.scorer import Scored
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import Rollout, SamplingParams
from alignment.training import checkpoint
from alignment.training.run_identity import RunIdentity
from alignment.training.tracking import MetricsLogger

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@contextmanager
def _staged(output_dir: str, writes: bool) -> Iterator[Staging]:
    with StagedOutput(output_dir, writes=writes) as out:
        yield Staging(out.dir, writes, out)
    barrier()  # every rank returns once the commit is in


class LocalGroups:
    def __init__(
        self,
        cfg: PPOConfig,
        rt: Runtime,
        actor: DeepSpeedEngine,
        critic: DeepSpeedEngine | None,
        ref: torch.nn.Module | None,
        reward: Callable[[list[str], list[str], list], Scored],
        tokenizer: PreTrainedTokenizerBase,
        critic_scale: tuple[float, float] | None = None,
        packing: Packing | None = None,
        moe_top_k: int = 0,
    ):
        self.cfg, self.rt, self.actor, self.critic, self.ref, self.reward = cfg, rt, actor, critic, ref, reward
        self.tokenizer = tokenizer
        # this controller's share of the prompts: a tensor-parallel replica's ranks take one share together
        self.rank, self.world, self.has_critic = rt.dp_rank, rt.dp_size, critic is not None
        self.packing = packing  # --packing_samples: the training and scoring forward passes on packed rows
        self.moe_top_k = moe_top_k  # > 0: --aux_loss_coef on a sparse-MoE actor
        self.micro = cfg.rollout.micro_batch_size
        self.gen = HFEngine(
            actor.module,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            batch_size=max(self.micro, 1),
            device=rt.torch_device,
            processor=processor_of(tokenizer),
        )
        self.capture = ValueCapture(critic.module, critic_scale) if critic is not None else None
        self.engines = {"actor": actor, **({"critic": critic} if critic is not None else {})}
        self.ema = EMA(actor.module, cfg.train.ema_beta) if cfg.train.enable_ema else None

    def generate(
        self, prompt_ids: list[list[int]], iteration: int, images: list[PromptImages] | None = None
    ) -> Done[Rollout]:
        return Done(self.gen.generate(prompt_ids, sampling_params(self.cfg, iteration, self.rank, self.world), images))

    def generate_turn(
        self, prompt_ids: list[list[int]], params: SamplingParams, images: list[PromptImages] | None = None
    ) -> Rollout:
        return self.gen.generate(prompt_ids, turn_params(params, self.rank, self.world), images)

    def scores(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        return self.reward(queries, prompts, labels)

    def actor_logprobs(self, batch: SequenceBatch) -> Done[torch.Tensor]:
        return Done(rank_ops.logprobs(self.actor.module, batch, self.cfg, self.packing))

    def ref_logprobs(self, batch: SequenceBatch) -> Done[torch.Tensor]:
        return Done(rank_ops.logprobs(self.ref, batch, self.cfg, self.packing))

    def values(self, batch: SequenceBatch) -> Done[torch.Tensor]:
        return Done(rank_ops.values(self.critic.module, self.capture, batch, self.cfg, self.packing))

    def train_critic(self, exp: Experience, seed: int) -> Done[dict[str, float]]:
        return Done(rank_ops.train_critic(self.critic, self.capture, exp, self.cfg, seed, self.packing))

    def train_actor(self, exp: Experience, kl_coef: float, seed: int) -> Done[dict[str, float]]:
        return Done(
            rank_ops.train_actor(self.actor, exp, self.cfg, kl_coef, seed, self.packing, self.ema, self.moe_top_k)
        )

    def sync_weights(self) -> float:
        return 0.0  # the HF engine generates with the module it trains

    def save(self, state: PPOState) -> None:
        cfg = self.cfg
        checkpoint.save(
            self.engines,
            cfg.ckpt.path,
            state.iteration,
            {"ppo": dataclasses.asdict(state)},
            cfg.ckpt.max_num,
            {"stage": "ppo", "config": public_dict(cfg)},
            extra={"actor": self.actor_extra},
            identity=RunIdentity.of(cfg),
            max_gb=cfg.ckpt.max_mem,
        )

    def mark_best(self, iteration: int) -> None:
        checkpoint.mark_best(self.cfg.ckpt.path, iteration)

    def actor_extra(self, role_dir: Path | None) -> None:
        """The actor's own files in a checkpoint: --save_hf_ckpt's HF copy, --enable_ema's average. Collective."""
        if self.cfg.ckpt.save_hf:
            save_hf_copy(self.actor, self.tokenizer, role_dir / "hf" if role_dir else None, lora=lora_save(self.cfg))
        if self.ema is not None:
            self.ema.save(role_dir)

    # --- the run's output (alignment/ppo/run.py) ------------------------------------------------
    def staging(self) -> AbstractContextManager[Staging]:
        """The model is built in a staged folder and committed over --save_path at the end: a committed model
        there stays intact until then."""
        return _staged(self.cfg.ckpt.output_dir, self.rt.is_main)

    def commit(self, staged: Staging, logger: MetricsLogger) -> None:
        """On every launcher rank (the saves gather ZeRO shards collectively); rank 0 writes."""
        cfg, out, tok = self.cfg, staged.handle, self.tokenizer
        if self.ema is not None and staged.dir is not None:  # --enable_ema: the average, beside the actor
            save_hf_model(self.actor.module, self.ema.state_dict(self.actor.module), tok, staged.dir / "ema",
                          lora=lora_save(cfg))  # fmt: skip
        if cfg.critic.save_value_network:  # collective: every rank gathers the critic
            save_value_model(self.critic, tok, staged.dir and staged.dir / "critic", cfg.ds.value_head_prefix)
        final = {"stage": "ppo", "config": public_dict(cfg), "final_metrics": logger.final(), "tracking": logger.links}
        commit_model(out, self.actor, tok, final, lora=lora_save(cfg), cfg=cfg)

    def resume(self) -> PPOState | None:
        """--load_checkpoint: the newest committed PPO state (engines loaded), or None to start fresh."""
        got = resume_state(
            self.cfg.ckpt, lambda: checkpoint.load_latest(self.engines, self.cfg.ckpt.path, RunIdentity.of(self.cfg))
        )
        if got and self.ema is not None:
            self.ema.load(checkpoint.role_dir(self.cfg.ckpt.path, got[1].name, "actor"), self.actor.module)
        return got[0] if got else None
