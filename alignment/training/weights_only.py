"""Reading DeepSpeed checkpoint files without executing code.

DeepSpeed's own loader uses `torch.load(weights_only=False)`, which unpickles arbitrary objects; a
damaged or planted file could run code when a resumed stage reads it. `WeightsOnlyCheckpointEngine`
loads with `weights_only=True` and an explicit allowlist of the few DeepSpeed types its files contain.
"""

from __future__ import annotations

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine


def _safe_globals() -> list:
    """Non-tensor types that appear in DeepSpeed checkpoint files (and nothing else)."""
    allowed: list = []
    try:
        from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler

        allowed += [LossScaler, DynamicLossScaler]
    except ImportError:
        pass
    try:
        from deepspeed.runtime.zero.config import ZeroStageEnum

        allowed.append(ZeroStageEnum)
    except ImportError:
        pass
    try:
        from deepspeed.utils.tensor_fragment import fragment_address

        allowed.append(fragment_address)
    except ImportError:
        pass
    return allowed


class WeightsOnlyCheckpointEngine(TorchCheckpointEngine):
    """DeepSpeed's torch checkpoint engine, loading with weights_only=True."""

    def load(self, path: str, map_location=None):
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)
