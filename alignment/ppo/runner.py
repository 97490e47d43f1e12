"""The outer PPO run, written once for both backends: the controller over the backend's model groups,
resume, the iterations (logged, checkpointed every --save_steps), and the metrics logger whose figures
the backend commits with the model. `train_ppo` passes its in-process groups (alignment/ppo/local.py),
`train_ppo_ray` its Ray groups (alignment/ppo/ray_driver.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample
from alignment.ppo.controller import ModelGroups, PPOController
from alignment.ppo.loop import run_iterations
from alignment.training.tracking import MetricsLogger

log = logging.getLogger(__name__)


def run(
    cfg: PPOConfig,
    groups: ModelGroups,
    tokenizer: Any,
    prompts: list[PromptSample],
    metrics_dir: Path | None,
    writes_metrics: bool,
    eval_prompts: list[PromptSample] = (),
) -> MetricsLogger:
    """Train; returns the closed-over logger (final metrics, tracking links) for the backend's commit."""
    ppo = PPOController(cfg, groups, tokenizer, prompts, eval_prompts)
    log.info(
        "PPO (%s): %d prompts, %d iterations of %d prompts x %d samples, %d optimizer steps per iteration",
        cfg.algo.advantage.estimator,
        len(prompts),
        ppo.total_iterations,
        cfg.rollout.batch_size,
        cfg.rollout.n_samples_per_prompt,
        ppo.steps_per_iteration,
    )
    start = groups.resume()
    samples = cfg.rollout.batch_size * cfg.rollout.n_samples_per_prompt
    logger = MetricsLogger(cfg, metrics_dir, writes_metrics, ppo.total_iterations, "ppo", samples)
    run_iterations(cfg, ppo.total_iterations, ppo, logger, groups.save, start, groups.mark_best)
    return logger
