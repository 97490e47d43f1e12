"""The RNG states of a process (Python, NumPy, torch, CUDA) as JSON, so a resumed stage draws the
same samples and dropout masks it would have drawn without the interruption."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    """This process's RNG states as JSON-able values."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict) -> None:
    """The RNG states a checkpoint's state.json holds, in this process."""
    rng = state["rng"]
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, *rest = rng["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    if rng["cuda"]:
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])
