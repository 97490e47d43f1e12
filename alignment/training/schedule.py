"""When a run commits a resumable checkpoint: every --save_steps steps and/or every --save_minutes.

The clock is read on rank 0 and its answer broadcast, so every rank saves at the same step (a
DeepSpeed checkpoint is collective); ranks whose clocks differ never disagree.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from alignment.config.checkpoints import Checkpoints


def _rank0_says(flag: bool) -> bool:
    if not dist.is_initialized():
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.broadcast(t, 0)
    return bool(t.item())


class SaveSchedule:
    def __init__(self, ckpt: Checkpoints):
        """`ckpt`: a stage config's checkpoint group (cfg.ckpt: save_steps, save_minutes, disable_ds)."""
        self.every_steps = ckpt.save_steps if not ckpt.disable_ds else -1
        self.every_s = ckpt.save_minutes * 60 if not ckpt.disable_ds else 0.0
        self.last_time, self.last_step = time.monotonic(), None

    @property
    def active(self) -> bool:
        return self.every_steps > 0 or self.every_s > 0

    def due(self, step: int) -> bool:
        """After optimizer step (PPO: iteration) `step`. Collective when --save_minutes is set."""
        by_steps = self.every_steps > 0 and step % self.every_steps == 0
        by_time = self.every_s > 0 and _rank0_says(time.monotonic() - self.last_time >= self.every_s)
        return by_steps or by_time

    def due_at_end(self, step: int) -> bool:
        """A final resumable state, unless the last save was at this very step."""
        return self.active and self.last_step != step

    def saved(self, step: int) -> None:
        self.last_time, self.last_step = time.monotonic(), step
