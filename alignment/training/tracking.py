"""Metrics out: a JSONL file, progress (a tqdm bar in a terminal, progress events in a pipeline),
and optionally wandb / TensorBoard (rank 0 only)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch
from tqdm import tqdm

from alignment import events
from alignment.config.tracking import LoggingConfig
from alignment.training.trackers import TensorBoard, keep_offline_run, start_wandb

log = logging.getLogger(__name__)

EVENT_EVERY_S = 1.0  # progress-only events at most this often (rows are always sent)


class MetricsLogger:
    def __init__(
        self,
        cfg: LoggingConfig,
        run_dir: str | Path | None,
        enabled: bool,
        total_steps: int,
        stage: str,
        samples_per_step: int = 0,
    ):
        self.enabled = enabled
        self.path = Path(run_dir or ".") / "metrics.jsonl"  # written only when enabled (rank 0)
        self._wandb = self._tb = self._bar = None
        self._events = False
        self.links: dict[str, str] = {}  # where the trackers' records are (for the stage's artifact)
        self.history: list[dict] = []
        self.total, self.samples_per_step = total_steps, samples_per_step
        self.step = self.first_step = 0
        self._last_event = 0.0
        self.started = time.monotonic()  # models are loaded by now: what follows is the loop
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if cfg.logger.wandb.key:
            self._wandb, self.links["wandb"] = start_wandb(cfg, stage)
        if cfg.logger.tensorboard_dir:
            self._tb = TensorBoard(cfg, Path(run_dir), stage)
            self.links["tensorboard"] = self._tb.where
        self._events = events.enabled()
        if not self._events:  # in a pipeline the task shows progress; a bar would only fill the job log
            self._bar = tqdm(total=total_steps, desc=stage, dynamic_ncols=True, mininterval=1.0)

    def restore(self, rows: list[dict], step: int = 0) -> None:
        """Start metrics.jsonl from a resumed checkpoint's history (empty for a fresh run), so the
        curve is whole and holds no rows from the part of a crashed run that is being redone.
        `step`: the optimizer step (PPO: iteration) the run resumes after."""
        self.history = list(rows)
        self.step = self.first_step = step
        if not self.enabled:
            return
        self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        if self._tb is not None:
            self._tb.replay(rows)
        if self._bar is not None and step:
            self._bar.update(step)
        self._emit({})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        values = {k: float(v) for k, v in metrics.items()}
        row = {"step": step, "time": round(time.time(), 3), **values}
        self.history.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
        if self._tb is not None:
            self._tb.log(step, values)
        if self._bar is not None:
            shown = {k.split("/")[-1]: f"{v:.4g}" for k, v in metrics.items() if k.startswith("train/")}
            self._bar.set_postfix(shown, refresh=False)
        self._emit(values)

    def advance(self, n: int = 1) -> None:
        self.step += n
        if self._bar is not None:
            self._bar.update(n)
        if self.enabled and (time.monotonic() - self._last_event >= EVENT_EVERY_S or self.step >= self.total):
            self._emit({})

    def _emit(self, row: dict[str, float]) -> None:
        if not self._events:
            return
        self._last_event = time.monotonic()
        samples = (self.step - self.first_step) * self.samples_per_step
        print(events.format_event(events.ProgressEvent(self.step, self.total, samples, row)), flush=True)

    def final(self) -> dict[str, float]:
        """The latest value of every logged key (an eval row is often followed by train rows) plus
        `time/loop_s`: seconds from this logger's start (models loaded) to now — how the pipeline
        report splits a stage's wall time into start-up and training."""
        last: dict = {}
        for row in self.history:
            last.update(row)
        return {**last, "time/loop_s": round(time.monotonic() - self.started, 2), **cuda_peak_memory()}

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            keep_offline_run(self._wandb)


def cuda_peak_memory() -> dict[str, float]:
    """This process's peak CUDA memory held by tensors (GiB), on GPUs only: what a stage needs."""

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"mem/cuda_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}
