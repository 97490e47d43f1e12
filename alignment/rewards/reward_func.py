"""Rewards from a user's Python file defining `reward_func(queries, prompts, labels) -> list[float]`
(OpenRLHF's `--remote_rm_url path/to/file.py` convention). The tiny world's rule ships as
`alignment/tiny_world/reward.py`."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Callable

from alignment.errors import TransientError

RewardFn = Callable[[list[str], list[str], list], list[float]]


class RewardError(RuntimeError):
    """A reward source failed or answered something unusable; the message says which and why."""


class RewardServerDown(RewardError, TransientError):
    """A reward server stayed unreachable (or answered 5xx) through every retry: worth running again later."""


def load_reward_func(path: str) -> RewardFn:
    file = Path(path)
    if not file.is_file():
        raise RewardError(f"--remote_rm_url {path}: no such file; pass a .py file defining reward_func or an http(s) URL")
    spec = importlib.util.spec_from_file_location(f"alignflow_reward_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "reward_func", None)
    if not callable(fn):
        raise RewardError(f"{path} defines no reward_func(queries, prompts, labels); add one returning a list of floats")
    return fn


def check_rewards(rewards: object, n: int, source: str) -> list[float]:
    """One finite float per query, or a RewardError naming the source."""
    if hasattr(rewards, "tolist"):
        rewards = rewards.tolist()
    if not isinstance(rewards, (list, tuple)) or len(rewards) != n:
        size = len(rewards) if isinstance(rewards, (list, tuple)) else type(rewards).__name__
        raise RewardError(f"{source}: expected {n} rewards, got {size}")
    out = []
    for i, r in enumerate(rewards):
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
            raise RewardError(f"{source}: reward {i} is {r!r}; every reward must be a finite number")
        out.append(float(r))
    return out
