"""The PPO iteration loop both entry points run around `PPOController.step` (`train_ppo` in-process,
`train_ppo_ray`'s driver): resume → iterate → log → checkpoint every --save_steps iterations /
--save_minutes. What an iteration does and how the engines save are passed in, so the loop holds no model code."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from alignment.config.checkpoints import Checkpoints
from alignment.config.ppo import PPOConfig
from alignment.ppo.evaluation import BestSoFar, eval_due
from alignment.trainers.base import maybe_inject_failure
from alignment.training.schedule import SaveSchedule
from alignment.training.tracking import MetricsLogger

if TYPE_CHECKING:
    from alignment.training.resume_point import Latest

log = logging.getLogger(__name__)


@dataclass
class PPOState:
    """Where the PPO loop is: saved in every checkpoint's state.json. Every random choice of an
    iteration is seeded from (--seed, iteration) — the episode's prompt order, the sampling seed,
    the mini-batch shuffle — so the iteration number restores them on any number of ranks."""

    iteration: int = 0  # iterations completed
    kl_coef: float = 0.0
    history: list[dict] = field(default_factory=list)
    reward_moments: list[float] = field(default_factory=list)  # --normalize_reward's running statistics, if kept
    best_metric: float | None = None  # --best_metric_key: the best evaluation so far (its checkpoint is `best`)
    pass_history: list[list[int]] = field(default_factory=list)  # --dynamic_filtering_recheck: [position, streak]


class Iterating(Protocol):
    """What the loop drives (alignment.ppo.controller.PPOController): an iteration, and the running
    statistics a checkpoint keeps (the adaptive KL coefficient, running reward moments)."""

    def step(self, iteration: int) -> dict[str, float]: ...
    def evaluate(self, iteration: int) -> dict[str, float]: ...
    def restore(self, state: PPOState) -> None: ...
    def snapshot(self, iteration: int, history: list[dict]) -> PPOState: ...


def resume_state(ckpt: Checkpoints, find: Callable[[], Latest | None]) -> tuple[PPOState, Latest] | None:
    """--load_checkpoint: (the PPO state, the checkpoint `find()` located: training.resume_point.Latest),
    or None to start from iteration 0. Both backends resume through here; `find` locates (and, in
    process, loads) the newest committed checkpoint."""
    found = find() if ckpt.load_enable else None
    if found is None:
        if ckpt.load_enable:
            log.info("--load_checkpoint: no committed PPO checkpoint under %s; starting from iteration 0", ckpt.path)
        return None
    state = PPOState(**found.state["ppo"])
    log.info("resuming PPO from %s (iteration %d done, KL coefficient %.4g)", found.uri, state.iteration, state.kl_coef)
    return state, found


def run_iterations(
    cfg: PPOConfig,
    total: int,
    ppo: Iterating,
    logger: MetricsLogger,
    save: Callable[[PPOState], None],
    start: PPOState | None,
    mark_best: Callable[[int], None] = lambda iteration: None,
) -> None:
    """The iterations after `start`; `save` commits a checkpoint, `mark_best` points --ckpt_path's `best` at the
    one of an iteration (--best_metric_key)."""
    first = 0
    if start is not None:
        first = start.iteration
        ppo.restore(start)
    # a resumed run keeps the rows up to its checkpoint (later ones are being redone); a fresh
    # run starts the file empty, even where an earlier run into the same --save_path left one
    logger.restore(start.history if start is not None else [], first)
    schedule = SaveSchedule(cfg.ckpt)
    if first:
        schedule.saved(first)  # the checkpoint it resumed from is the last save
    best = BestSoFar(cfg.best_metric(), start.best_metric if start is not None else None)

    def snapshot(iteration: int) -> PPOState:
        state = ppo.snapshot(iteration, list(logger.history))
        state.best_metric = best.value
        return state

    for it in range(first, total):
        metrics = ppo.step(it)
        logger.advance()
        row, improved = {}, False
        if (it + 1) % cfg.logger.logging_steps == 0 or it + 1 == total:
            row.update({f"train/{k}": v for k, v in metrics.items()})
        if cfg.eval.dataset and eval_due(cfg.eval.steps, it + 1, total):  # --eval_dataset, alignment/ppo/evaluation.py
            evals = ppo.evaluate(it + 1)
            row.update({f"eval/{k}": v for k, v in evals.items()})
            improved = best.improved(evals)
        if row:
            logger.log(it + 1, row)
        if improved or schedule.due(it + 1) or (it + 1 == total and schedule.due_at_end(it + 1)):
            save(snapshot(it + 1))
            schedule.saved(it + 1)
        if improved:
            mark_best(it + 1)
            log.info("--best_metric_key: iteration %d's %s %.4f is the best so far", it + 1, best.metric, best.value)
        maybe_inject_failure(it + 1)
    log.info("ppo: ran iterations %d..%d of %d in this process", first + 1, total, total)
