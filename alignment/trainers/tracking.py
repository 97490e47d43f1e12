"""Metrics out: a JSONL file, a progress bar, and optionally wandb / TensorBoard (rank 0 only)."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class MetricsLogger:
    def __init__(self, cfg: Any, run_dir: str | Path, enabled: bool, total_steps: int, stage: str):
        self.enabled = enabled
        self.path = Path(run_dir) / "metrics.jsonl"
        self._wandb = self._tb = self._bar = None
        self.history: list[dict] = []
        self.started = time.monotonic()     # models are loaded by now: what follows is the loop
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if cfg.use_wandb:
            self._wandb = _start_wandb(cfg, stage)
        if cfg.use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            self._tb = SummaryWriter(os.path.join(cfg.use_tensorboard, cfg.wandb_run_name or stage))
        from tqdm import tqdm
        self._bar = tqdm(total=total_steps, desc=stage, dynamic_ncols=True, mininterval=1.0)

    def restore(self, rows: list[dict]) -> None:
        """Start metrics.jsonl from a resumed checkpoint's history (empty for a fresh run), so the
        curve is whole and holds no rows from the part of a crashed run that is being redone."""
        self.history = list(rows)
        if not self.enabled:
            return
        self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        if self._bar is not None and rows:
            self._bar.update(rows[-1].get("step", 0))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        row = {"step": step, "time": round(time.time(), 3), **{k: float(v) for k, v in metrics.items()}}
        self.history.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
        if self._tb is not None:
            for k, v in metrics.items():
                self._tb.add_scalar(k, v, step)
        if self._bar is not None:
            shown = {k.split("/")[-1]: f"{v:.4g}" for k, v in metrics.items() if k.startswith("train/")}
            self._bar.set_postfix(shown, refresh=False)

    def final(self) -> dict[str, float]:
        """The latest value of every logged key (an eval row is often followed by train rows) plus
        `time/loop_s`: seconds from this logger's start (models loaded) to now — how the pipeline
        report splits a stage's wall time into start-up and training."""
        last: dict = {}
        for row in self.history:
            last.update(row)
        return {**last, "time/loop_s": round(time.monotonic() - self.started, 2), **cuda_peak_memory()}

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def cuda_peak_memory() -> dict[str, float]:
    """This process's peak CUDA memory held by tensors (GiB), on GPUs only: what a stage needs."""
    import torch
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"mem/cuda_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}


def _start_wandb(cfg: Any, stage: str) -> Any:
    import wandb

    key = cfg.use_wandb
    if key.lower() == "offline" or os.environ.get("WANDB_MODE") == "offline":
        os.environ["WANDB_MODE"] = "offline"  # no network or no key: log locally, sync later
    elif key.lower() in ("true", "1", "env"):
        wandb.login()  # the key comes from WANDB_API_KEY (how pipelines pass it: never as a parameter)
    else:
        wandb.login(key=key, relogin=True)  # the key itself is never logged
    return wandb.init(entity=cfg.wandb_org, project=cfg.wandb_project, group=cfg.wandb_group,
                      name=cfg.wandb_run_name or stage, config={k: v for k, v in vars(cfg).items() if k != "use_wandb"},
                      reinit="finish_previous")
