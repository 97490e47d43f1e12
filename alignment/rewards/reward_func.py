"""Rewards from a user's Python file defining `reward_func(queries, prompts, labels, **kwargs)` (OpenRLHF's
`--remote_rm_url path/to/file.py` convention). The tiny world's rule ships as `alignment/tiny_world/reward.py`.

It may return, as OpenRLHF >= 0.8's files do, a dict — `rewards` (for the advantage), optionally `scores`
(what dynamic filtering reads; default: the rewards) and `extra_logs` ({name: one number per sample, or one
number}, logged with the iteration's metrics, averaged) — or, as older files do, a plain list/tensor of rewards.
A reward server may answer with the same dict.

An `async def reward_func` (one that awaits an API, a sandbox, a judge model) is called once per sample, and
up to IN_FLIGHT of those calls are awaited at once, so a batch costs about its slowest call, not their sum;
a plain `def` is called once for the whole batch, as OpenRLHF calls it."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from alignment import openrlhf_names
from alignment.errors import TransientError, UserError

RewardFn = Callable[..., Any]  # (queries, prompts, labels, **kwargs) -> rewards, or the dict above
IN_FLIGHT = 32  # calls of an async reward_func awaited at once (requests to reward servers: remote.py)


@dataclass(frozen=True)
class RewardOutput:
    """A reward source's answer for B samples."""

    rewards: list[float]  # [B] for the advantage
    scores: list[float]  # [B] for dynamic filtering
    logs: dict[str, float] = field(default_factory=dict)  # extra_logs, each averaged over the B samples


class RewardError(UserError, RuntimeError):
    """A reward source failed or answered something unusable; the message says which and why."""


class RewardServerDown(RewardError, TransientError):
    """A reward server stayed unreachable (or answered 5xx) through every retry: worth running again later."""


def load_reward_func(path: str) -> RewardFn:
    file = Path(path)
    if not file.is_file():
        raise RewardError(
            f"--remote_rm_url {path}: no such file; pass a .py file defining reward_func or an http(s) URL"
        )
    openrlhf_names.install()  # a file written for OpenRLHF imports openrlhf.utils (alignment/openrlhf_names.py)
    spec = importlib.util.spec_from_file_location(f"alignflow_reward_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "reward_func", None)
    if not callable(fn):
        raise RewardError(
            f"{path} defines no reward_func(queries, prompts, labels); add one returning a list of floats"
        )
    try:  # how it is called: three lists by position (OpenRLHF passes no keywords either)
        inspect.signature(fn).bind([], [], [])
    except TypeError:
        raise RewardError(
            f"{path}: reward_func{inspect.signature(fn)} cannot be called as reward_func(queries, "
            f"prompts, labels); define it as reward_func(queries, prompts, labels, **kwargs)"
        ) from None
    except ValueError:  # a builtin or C function without a signature: the first call says
        pass
    return PerSample(fn, str(path)) if inspect.iscoroutinefunction(fn) else fn


@dataclass(frozen=True)
class PerSample:
    """An async reward_func as a plain one: awaited once per sample, up to IN_FLIGHT at once (module docstring)."""

    fn: RewardFn
    source: str

    def __call__(self, queries: list[str], prompts: list[str], labels: list) -> RewardOutput:
        return asyncio.run(self._all(queries, prompts, labels))

    async def _all(self, queries: list[str], prompts: list[str], labels: list) -> RewardOutput:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> RewardOutput:
            async with gate:
                out = await self.fn([queries[i]], [prompts[i]], [labels[i]])
            return parse_output(out, 1, self.source)

        return merge_outputs(list(await asyncio.gather(*(one(i) for i in range(len(queries))))))


def parse_output(out: object, n: int, source: str) -> RewardOutput:
    """A reward source's answer for n samples as a RewardOutput, or one RewardError line naming the source."""
    if not isinstance(out, dict):
        rewards = check_rewards(out, n, source)
        return RewardOutput(rewards, rewards)
    unknown = set(out) - {"rewards", "scores", "extra_logs"}
    if "rewards" not in out or unknown:
        raise RewardError(
            f"{source}: a dict answer needs 'rewards' (and optionally 'scores', 'extra_logs'); got keys "
            f"{sorted(out)}"
        )
    rewards = check_rewards(out["rewards"], n, f"{source} ['rewards']")
    scores = check_rewards(out["scores"], n, f"{source} ['scores']") if out.get("scores") is not None else rewards
    logs = {}
    extra = out.get("extra_logs") or {}
    if not isinstance(extra, dict):
        raise RewardError(f"{source}: 'extra_logs' must be a dict of name: numbers, got {type(extra).__name__}")
    for name, values in extra.items():
        values = values.tolist() if hasattr(values, "tolist") else values
        values = values if isinstance(values, (list, tuple)) else [values]
        got = check_rewards(values, len(values), f"{source} ['extra_logs'][{name!r}]") if values else []
        if len(got) not in (1, n):
            raise RewardError(f"{source}: extra_logs[{name!r}] has {len(got)} values; give one per sample ({n}) or one")
        logs[str(name)] = sum(got) / len(got)
    return RewardOutput(rewards, scores, logs)


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


def merge_outputs(parts: list[RewardOutput]) -> RewardOutput:
    """Consecutive chunks' answers as one (extra_logs averaged by chunk size)."""
    n = sum(len(p.rewards) for p in parts)
    names = {k for p in parts for k in p.logs}
    logs = {
        k: sum(p.logs[k] * len(p.rewards) for p in parts if k in p.logs)
        / max(1, sum(len(p.rewards) for p in parts if k in p.logs))
        for k in names
    }
    return (
        RewardOutput([r for p in parts for r in p.rewards], [s for p in parts for s in p.scores], logs)
        if n
        else RewardOutput([], [], {})
    )
