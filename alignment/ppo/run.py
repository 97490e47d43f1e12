"""One PPO run, written once for both backends, in torchtune's recipe lifecycle: setup → train → commit.

- **setup** (`setup`): the prompts, the evaluation prompts and the run's sizes (`schedule.Sizes`: the batch checks,
  the steps per iteration, the run's length), from the tokenizer every rank loads alike
  (`models.builder.tokenizer_for`). On the Ray path this runs in the driver before anything is placed.
- **train** (`run`): the controller over the backend's model groups, resume, the iterations (logged, checkpointed
  every --save_steps), the metrics logger.
- **commit**: the backend's `commit`, once the trackers' files are complete: the in-process backend
  (alignment/ppo/local.py) writes on every launcher rank into the staged output it opened; the Ray backend
  (alignment/ppo/ray_driver.py) through the actor's ranks, which hold the weights.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample, load_prompts
from alignment.ppo.controller import ModelGroups, PPOController
from alignment.ppo.loop import run_iterations
from alignment.ppo.schedule import Sizes
from alignment.training.tracking import MetricsLogger

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Setup:
    tokenizer: PreTrainedTokenizerBase
    prompts: list[PromptSample]
    eval_prompts: list[PromptSample]
    sizes: Sizes


def setup(cfg: PPOConfig, tokenizer: PreTrainedTokenizerBase, dp_size: int) -> Setup:
    """The run's prompts and sizes; `dp_size`: the data-parallel controllers (launcher ranks over their
    tensor-parallel replicas, or one Ray driver over the actor's replicas). Fails in one line on sizes that
    don't fit, before any weights load."""
    prompts = load_prompts(cfg, tokenizer, cfg.data.prompt_dataset, cfg.data.prompt_split)
    eval_prompts = load_prompts(cfg, tokenizer, cfg.eval.dataset, cfg.eval.split) if cfg.eval.dataset else []
    return Setup(tokenizer, prompts, eval_prompts, Sizes.of(cfg, len(prompts), dp_size))


@dataclass(frozen=True)
class Staging:
    """Where a run writes what it commits at the end."""

    dir: Path | None  # the metrics (and, in process, the model); None on a rank that writes nothing
    writes: bool  # this process writes the metrics
    handle: Any = None  # the backend's own (the in-process backend's StagedOutput)


class Backend(ModelGroups, Protocol):
    """A backend's model groups, plus where its run writes and how it commits."""

    def staging(self) -> AbstractContextManager[Staging]: ...
    def commit(self, staged: Staging, logger: MetricsLogger) -> None: ...


def run(cfg: PPOConfig, s: Setup, backend: Backend) -> dict[str, float]:
    """Train, then commit; returns the final metrics."""
    sizes = s.sizes
    ppo = PPOController(cfg, backend, s.tokenizer, s.prompts, s.eval_prompts, sizes)
    log.info(
        "PPO (%s): %d prompts, %d iterations of %d prompts x %d samples, %d optimizer steps per iteration",
        cfg.algo.advantage.estimator,
        len(s.prompts),
        sizes.iterations,
        cfg.rollout.batch_size,
        cfg.rollout.n_samples_per_prompt,
        sizes.steps_per_iteration,
    )
    start = backend.resume()
    with backend.staging() as staged:
        logger = MetricsLogger(cfg, staged.dir, staged.writes, sizes.iterations, "ppo", sizes.samples_per_iteration)
        run_iterations(cfg, sizes.iterations, ppo, logger, backend.save, start, backend.mark_best)
        logger.close()  # the trackers' files are complete before the model (and the card naming them) commits
        backend.commit(staged, logger)
    return logger.final()
