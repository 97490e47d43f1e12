"""The training loop every DeepSpeed stage shares: epochs of resumable micro-batches,
gradient accumulation, logging, evaluation, checkpoints and the final HF-format model.

A stage subclasses `Trainer` and provides `collate`, `loss_on` and `eval_metrics`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from alignment.config import TrainerConfig
from alignment.config.base import ConfigError, public_dict
from alignment.config.runs import TrainConfig
from alignment.distributed.collectives import barrier, mean_across_ranks
from alignment.distributed.runtime import Runtime
from alignment.models.saving import commit_model, lora_save, save_hf_copy
from alignment.nonfinite import NonFiniteGuard, zero_loss
from alignment.outputs import StagedOutput
from alignment.training import checkpoint
from alignment.training.engine import step as engine_step
from alignment.training.run_identity import RunIdentity
from alignment.training.sampler import micro_batches, micro_batches_per_epoch
from alignment.training.schedule import SaveSchedule
from alignment.training.tracking import MetricsLogger

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass
class LoopState:
    """Where the training loop is: saved in every checkpoint's state.json."""

    global_step: int = 0
    epoch: int = 0
    micro_batches_done: int = 0  # in the current epoch, on each rank
    history: list[dict] = field(default_factory=list)  # logged metrics so far


def steps_per_epoch(num_samples: int, cfg: TrainConfig, world_size: int) -> int:
    return micro_batches_per_epoch(num_samples, cfg.train.micro_batch_size, world_size) // cfg.accumulation_steps(
        world_size
    )


def total_steps(num_samples: int, cfg: TrainConfig, world_size: int) -> int:
    steps = steps_per_epoch(num_samples, cfg, world_size) * cfg.train.max_epochs
    return min(steps, cfg.train.max_steps) if cfg.train.max_steps > 0 else steps


def eval_shard(n: int, rank: int, world: int) -> list[tuple[int, float]]:
    """(index, weight) of this rank's share of n eval items. Every rank gets the same count
    (padded with weight-0 repeats) so ZeRO-3's collective forwards stay in step."""
    per_rank = -(-n // world)
    return [(i, 1.0) if i < n else (0, 0.0) for i in range(rank * per_rank, (rank + 1) * per_rank)]


def maybe_inject_nan(loss: torch.Tensor, step: int) -> torch.Tensor:
    """ALIGNFLOW_NAN_AT_STEP=N makes every micro-batch loss of optimizer step N NaN: how the tests exercise the
    non-finite guard (alignment/nonfinite.py) without a diverging recipe."""
    nan_at = int(os.environ.get("ALIGNFLOW_NAN_AT_STEP", "0"))
    return loss * float("nan") if nan_at and step == nan_at else loss


def maybe_inject_failure(step: int) -> None:
    """ALIGNFLOW_FAIL_AT_STEP=N crashes the run after step N (and its checkpoint);
    ALIGNFLOW_HANG_AT_STEP=N makes it hang there, silent, as a stuck collective would: how the tests
    and the resume/reliability docs exercise "a failed or hung stage resumes from its last checkpoint"."""
    fail_at = int(os.environ.get("ALIGNFLOW_FAIL_AT_STEP", "0"))
    if fail_at and step == fail_at:
        raise RuntimeError(f"ALIGNFLOW_FAIL_AT_STEP={fail_at}: simulated failure after step {step}")
    hang_at = int(os.environ.get("ALIGNFLOW_HANG_AT_STEP", "0"))
    if hang_at and step == hang_at:
        log.warning("ALIGNFLOW_HANG_AT_STEP=%d: hanging after step %d", hang_at, step)
        while True:
            time.sleep(3600)


class Trainer:
    stage = "train"

    def __init__(
        self,
        cfg: TrainerConfig,
        rt: Runtime,
        engine: DeepSpeedEngine,
        tokenizer: PreTrainedTokenizerBase,
        train_set: list,
        eval_set: list | None,
    ):
        self.cfg, self.rt, self.engine, self.tokenizer = cfg, rt, engine, tokenizer
        self.train_set, self.eval_set = train_set, eval_set
        self.position = (0, 0)  # (epoch, micro-batch in it) of the micro-batch being trained
        self.schedule = SaveSchedule(cfg.ckpt)
        self.guard = NonFiniteGuard(cfg.train.max_nonfinite_skips, self.stage)
        self.accum = cfg.accumulation_steps(rt.dp_size)
        self.steps_per_epoch = steps_per_epoch(len(train_set), cfg, rt.dp_size)
        self.total_steps = total_steps(len(train_set), cfg, rt.dp_size)
        if self.steps_per_epoch == 0:
            raise ConfigError(
                f"{len(train_set)} training samples are fewer than one --train_batch_size "
                f"({cfg.train.batch_size}): lower --train_batch_size or add data"
            )

    # --- to implement per stage -------------------------------------------------------
    def collate(self, items: list) -> Any:
        raise NotImplementedError

    def loss_on(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def eval_metrics(self) -> dict[str, float]:
        return {}

    def final_config(self) -> dict[str, Any]:
        """Extra config.json entries for the saved model. Collective: runs on every rank."""
        return {}

    def export_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The weights as they are named in the saved files."""
        return state

    # --- shared loop ------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        cfg, rt = self.cfg, self.rt
        state = LoopState()
        if cfg.ckpt.load_enable and (
            found := checkpoint.load_latest({"model": self.engine}, cfg.ckpt.path, RunIdentity.of(cfg))
        ):
            state = LoopState(**found.state["loop"])
            log.info(
                "resumed from %s (step %d, epoch %d, micro-batch %d)",
                found.uri,
                state.global_step,
                state.epoch,
                state.micro_batches_done,
            )
            if state.global_step:
                self.schedule.saved(state.global_step)  # that checkpoint is the last save
        # the model is built here; a committed model at --save_path stays untouched until the commit
        with StagedOutput(cfg.ckpt.output_dir, writes=rt.is_main) as out:  # other ranks write nothing
            logger = MetricsLogger(cfg, out.dir, rt.is_main, self.total_steps, self.stage, cfg.train.batch_size)
            logger.restore(state.history, state.global_step)  # rows logged after the resumed checkpoint are dropped
            first_step = state.global_step + 1
            self._train(state, logger)
            if self.schedule.due_at_end(state.global_step):
                self._checkpoint(state, logger)  # a final resumable checkpoint too
            log.info(
                "%s: ran optimizer steps %d..%d of %d in this process",
                self.stage,
                first_step,
                state.global_step,
                self.total_steps,
            )
            # the trackers' files are complete before the model (and the card naming them) is committed
            logger.close()
            self.save_final(out, logger)
        return logger.final()

    def _train(self, state: LoopState, logger: MetricsLogger) -> None:
        """Optimizer steps from `state` (advanced in place) to total_steps, with logging, evaluation
        and checkpoints on their schedules."""
        cfg, rt = self.cfg, self.rt
        self.engine.train()
        done = state.global_step >= self.total_steps
        step_metrics: list[dict[str, float]] = []
        while not done and state.epoch < cfg.train.max_epochs:
            batches = micro_batches(
                len(self.train_set), cfg.train.micro_batch_size, rt.dp_rank, rt.dp_size, cfg.train.seed, state.epoch
            )[: self.steps_per_epoch * self.accum]
            for idx in batches[state.micro_batches_done :]:
                self.position = (state.epoch, state.micro_batches_done)  # a stage that samples seeds from it
                loss, metrics = self.loss_on(self.collate([self.train_set[i] for i in idx]))
                loss = maybe_inject_nan(loss, state.global_step + 1)
                if self.guard.loss(loss, state.global_step + 1):  # all ranks agree; raises when out of skips
                    step_metrics.append({"loss": loss.item(), **metrics})
                else:
                    loss = zero_loss(self.engine.module.parameters())
                self.engine.backward(loss)
                if engine_step(self.engine):
                    self.guard.grad_norm(self.engine, state.global_step + 1)
                state.micro_batches_done += 1
                if state.micro_batches_done % self.accum:
                    continue
                state.global_step += 1
                logger.advance()
                self._after_step(state, logger, step_metrics)
                step_metrics = []
                maybe_inject_failure(state.global_step)
                if state.global_step >= self.total_steps:
                    done = True
                    break
            if not done:
                state.epoch += 1
                state.micro_batches_done = 0
                if cfg.eval.steps == -1 and self.eval_set:
                    self._log(state, logger, {f"eval/{k}": v for k, v in self.eval_metrics().items()})
        if cfg.eval.steps == -1 and self.eval_set and done:
            self._log(state, logger, {f"eval/{k}": v for k, v in self.eval_metrics().items()})

    def _log(self, state: LoopState, logger: MetricsLogger, metrics: dict[str, float]) -> None:
        metrics = mean_across_ranks(metrics)
        logger.log(state.global_step, metrics)
        state.history = logger.history

    def _after_step(self, state: LoopState, logger: MetricsLogger, step_metrics: list[dict[str, float]]) -> None:
        cfg = self.cfg
        if state.global_step % cfg.logger.logging_steps == 0 and step_metrics:  # empty: every micro-batch skipped
            keys = step_metrics[0].keys()
            avg = {f"train/{k}": sum(m[k] for m in step_metrics) / len(step_metrics) for k in keys}
            avg["train/lr"] = self.engine.get_lr()[0]
            self._log(state, logger, avg)
        if cfg.eval.steps > 0 and state.global_step % cfg.eval.steps == 0 and self.eval_set:
            self._log(state, logger, {f"eval/{k}": v for k, v in self.eval_metrics().items()})
            self.engine.train()
        if self.schedule.due(state.global_step):
            self._checkpoint(state, logger)

    def _checkpoint(self, state: LoopState, logger: MetricsLogger) -> None:
        state.history = logger.history
        extra = {"model": self.hf_copy} if self.cfg.ckpt.save_hf else None
        checkpoint.save(
            {"model": self.engine},
            self.cfg.ckpt.path,
            state.global_step,
            {"loop": asdict(state)},
            self.cfg.ckpt.max_num,
            metadata={"stage": self.stage},
            extra=extra,
            identity=RunIdentity.of(self.cfg),
            max_gb=self.cfg.ckpt.max_mem,
        )
        self.schedule.saved(state.global_step)

    def hf_copy(self, role_dir: Path | None) -> None:
        """--save_hf_ckpt: the model as the final commit saves it, into a checkpoint's `model/hf/`. Collective."""
        save_hf_copy(
            self.engine,
            self.tokenizer,
            role_dir / "hf" if role_dir else None,
            self.final_config(),
            self.export_state,
            lora_save(self.cfg),
        )

    def save_final(self, out: StagedOutput, logger: MetricsLogger) -> None:
        extra_config = self.final_config()  # collective
        commit_model(
            out,
            self.engine,
            self.tokenizer,
            {
                "stage": self.stage,
                "config": public_dict(self.cfg),
                "final_metrics": logger.final(),
                "tracking": logger.links,
            },
            extra_config,
            self.export_state,
            lora=lora_save(self.cfg),
            cfg=self.cfg,
        )  # collective
        barrier()
