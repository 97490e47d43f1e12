"""The PPO iteration loop both controllers share (`train_ppo` in-process, `train_ppo_ray`'s
driver): resume → iterate → log → checkpoint every --save_steps iterations. What an iteration
does and how the engines save are passed in, so the loop holds no model code."""
from __future__ import annotations

import logging
from typing import Any, Callable

from alignment.losses.kl import KLController
from alignment.ppo.checkpoint import PPOState
from alignment.trainers.base import maybe_inject_failure
from alignment.trainers.tracking import MetricsLogger

log = logging.getLogger(__name__)


def should_save(cfg: Any, done: int, total: int) -> bool:
    """After `done` iterations: every --save_steps, and once more at the end (a final resumable state)."""
    if cfg.save_steps <= 0 or cfg.disable_ds_ckpt:
        return False
    return done % cfg.save_steps == 0 or done == total


def run_iterations(cfg: Any, total: int, step: Callable[[int], dict[str, float]], kl_ctl: KLController,
                   logger: MetricsLogger, save: Callable[[PPOState], None], start: PPOState | None) -> None:
    first = 0
    if start is not None:
        first, kl_ctl.value = start.iteration, start.kl_coef
    # a resumed run keeps the rows up to its checkpoint (later ones are being redone); a fresh
    # run starts the file empty, even where an earlier run into the same --save_path left one
    logger.restore(start.history if start is not None else [], first)
    for it in range(first, total):
        metrics = step(it)
        logger.advance()
        if (it + 1) % cfg.logging_steps == 0 or it + 1 == total:
            logger.log(it + 1, {f"train/{k}": v for k, v in metrics.items()})
        if should_save(cfg, it + 1, total):
            save(PPOState(it + 1, kl_ctl.value, list(logger.history)))
        maybe_inject_failure(it + 1)
    log.info("ppo: ran iterations %d..%d of %d in this process", first + 1, total, total)
