"""Stop on a NaN/Inf before it reaches the weights, and never commit weights that hold one.

bf16 and fp32 DeepSpeed engines step whatever gradient they are given (only fp16's loss scaler skips
overflowing steps), so a loss that goes NaN — a learning rate too high, a bad row, a damaged
checkpoint — would be trained into the model and committed with exit 0. Every stage therefore checks
each micro-batch's loss before its backward, all ranks agreeing, and the gradient norm after each
optimizer step:

- a non-finite loss skips that micro-batch while `--max_nonfinite_skips` allows (its gradient is an
  exact zero, so DeepSpeed's accumulation and its collectives stay in step), else stops the stage;
- a non-finite gradient norm stops the stage: the step has been taken, so nothing after it is kept;
- the weights are checked once more when the model is committed (`check_weights`).

A stop is a NonFiniteError: one line naming the step and the loss, exit 2 (a rerun resumes from the
last committed checkpoint and would meet the same NaN: the fix is in the flags or the data).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Iterable

import torch
import torch.distributed as dist

from alignment.errors import UserError

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

log = logging.getLogger(__name__)


class NonFiniteError(UserError, RuntimeError):
    """A loss, gradient norm or weight went NaN/Inf: the stage stops and commits nothing."""


_FIX = "lower --learning_rate, check the data, or pass --max_nonfinite_skips N to skip up to N such micro-batches"


def _any_rank(flag: bool, device: torch.device) -> bool:
    """True when `flag` is true on any rank: every rank must take the same branch (collectives follow)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def zero_loss(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """A loss whose gradient is exactly 0 for every trainable parameter, built from the parameters alone
    (not from the NaN graph: 0 x NaN is NaN), so a skipped micro-batch still runs DeepSpeed's backward
    hooks and gradient reductions like the others."""
    trainable = [p for p in params if p.requires_grad]
    return sum((p.sum() * 0.0 for p in trainable), torch.zeros((), device=trainable[0].device))


class NonFiniteGuard:
    """One per training loop; `skips` counts the micro-batches skipped so far (kept across a resume by
    the caller when it wants a budget per run rather than per process)."""

    def __init__(self, max_skips: int, stage: str):
        self.max_skips, self.stage, self.skips = max_skips, stage, 0

    def loss(self, loss: torch.Tensor, step: int, name: str = "loss") -> bool:
        """True: train on this micro-batch. False: skip it (the caller backs up zero_loss instead).
        Raises NonFiniteError when the loss is non-finite on any rank and no skip is left."""
        bad = _any_rank(not bool(torch.isfinite(loss.detach()).all()), loss.device)
        if not bad:
            return True
        value = loss.detach().float().flatten()[0].item() if loss.numel() else float("nan")
        if self.skips < self.max_skips:
            self.skips += 1
            log.warning(
                "%s: step %d: the %s is %s on some rank; skipping this micro-batch (%d of "
                "--max_nonfinite_skips %d used)",
                self.stage,
                step,
                name,
                value,
                self.skips,
                self.max_skips,
            )
            return False
        raise NonFiniteError(
            f"{self.stage}: the {name} became {value} at optimizer step {step} (non-finite); "
            f"stopped without committing: {_FIX}"
        )

    def grad_norm(self, engine: DeepSpeedEngine, step: int) -> None:
        """After an optimizer step: its gradient norm, where DeepSpeed computed one (it does when clipping)."""
        norm = engine.get_global_grad_norm()
        if norm is None:
            return
        value = float(norm.item() if isinstance(norm, torch.Tensor) else norm)
        if not math.isfinite(value):
            raise NonFiniteError(
                f"{self.stage}: the gradient norm became {value} at optimizer step {step} "
                f"(non-finite); the step was taken, so the run stops without committing: {_FIX}"
            )


def check_weights(state: dict[str, torch.Tensor], where: str) -> None:
    """The last line of defence before a commit: every floating-point tensor is finite."""
    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(
                f"{where}: weight {name} holds NaN/Inf; not committed (the run that produced it diverged: {_FIX})"
            )
