"""Only finite checkpoints commit, and a resume never loads a non-finite one.

An update can overflow the weights while that step's loss and gradient norm were finite (a learning
rate of 1e38: every weight Inf after the step). The loss and norm checks (alignment/nonfinite.py) then see
nothing until the next step, and a checkpoint saved in between was committed, sha256-valid, and resumed
into by every later run. So before any rank saves a checkpoint, every rank checks its share of every
engine's weights — the module's parameters (ZeRO-3: this rank's partition) and the fp32 master copy
ZeRO-1/2 keep in the optimizer — and all ranks agree (one all-reduce): a NaN/Inf stops the run on every
rank, one line, nothing written. A checkpoint committed that way records `finite: true` in its manifest;
one without it (committed by an older version) has its saved weights read back at resume, and a
non-finite one is skipped like a damaged one (alignment/training/checkpoint.py, find_latest).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import torch

from alignment.nonfinite import NonFiniteError, _any_rank
from alignment.storage import StorageError
from alignment.training.weights_only import WeightsOnlyCheckpointEngine

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

FINITE = "finite"  # the manifest metadata key: the weights were checked before this checkpoint was saved


class NonFiniteCheckpoint(StorageError):
    """A committed checkpoint whose saved weights hold a NaN/Inf: skipped at resume like a damaged one."""


def first_nonfinite(named: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first floating-point tensor holding a NaN/Inf, None when all are finite."""
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            return name
    return None


def _rank_weights(engine: DeepSpeedEngine) -> Iterator[tuple[str, torch.Tensor]]:
    """This rank's share of an engine's weights: each parameter (its ZeRO-3 partition, `ds_tensor`, where
    the full tensor is a placeholder) and the optimizer's fp32 master partitions (ZeRO-1/2)."""
    module = getattr(engine, "module", engine)
    for name, p in module.named_parameters():
        yield name, getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p.data
    optimizer = getattr(engine, "optimizer", None)
    for i, t in enumerate(getattr(optimizer, "single_partition_of_fp32_groups", None) or ()):
        yield f"fp32 master partition {i}", t


def check_engines(engines: dict[str, DeepSpeedEngine], where: str, step: int) -> None:
    """Every rank of the group holding `engines` (role -> DeepSpeed engine), before any of them saves:
    NonFiniteError on every rank when any rank's share of any engine's weights holds a NaN/Inf."""
    found = None
    device = torch.device("cpu")
    for role, engine in engines.items():
        device = next(getattr(engine, "module", engine).parameters()).device
        name = first_nonfinite(_rank_weights(engine))
        if name is not None:
            found = f"the {role}'s weight {name}"
            break
    if _any_rank(found is not None, device):
        raise NonFiniteError(
            f"{where}: {found or 'a weight on another rank'} holds NaN/Inf after optimizer step {step} (the "
            f"update overflowed the weights); not committed, the run stops: lower the learning rate "
            f"(--learning_rate; PPO: --actor_learning_rate, --critic_learning_rate) or lengthen the warmup"
        )


def _saved_weights(data: dict) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights in one DeepSpeed file: a model-states file's `module` and an optimizer-states file's fp32
    master partitions (ZeRO-1/2: single_partition_of_fp32_groups, ZeRO-3: fp32_flat_groups)."""
    yield from (data.get("module") or {}).items()
    optim = data.get("optimizer_state_dict") or {}
    for key in ("single_partition_of_fp32_groups", "fp32_flat_groups"):
        yield from ((f"{key}[{i}]", t) for i, t in enumerate(optim.get(key) or ()))


def check_saved(folder: Path, uri: str) -> None:
    """A checkpoint committed without FINITE (an older version did not check): NonFiniteCheckpoint when its
    saved weights hold a NaN/Inf. Read with weights_only=True, like every checkpoint load."""
    loader = WeightsOnlyCheckpointEngine()  # DeepSpeed's own types allowed, nothing else
    for path in sorted(folder.rglob("*.pt")):
        data = loader.load(str(path), map_location="cpu")
        name = first_nonfinite(_saved_weights(data)) if isinstance(data, dict) else None
        if name is not None:
            raise NonFiniteCheckpoint(f"{uri}: {path.relative_to(folder)} holds NaN/Inf in {name}")
