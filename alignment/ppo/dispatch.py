"""How a call on a model group reaches its ranks, declared once on each worker method (in the spirit of verl's
`@register(dispatch_mode=...)`): `@dispatch(ROWS)` on `ModelWorker.logprobs` says each rank gets its
contiguous rows and the results are concatenated in rank order. The driver calls
`group.call(ModelWorker.logprobs, batch)` (alignment/ppo/groups.py): a reader follows the call to the
worker's method, and the sharding is written here once instead of per method. Generation is such a call too
(`PROMPTS`), on the vLLM engines or the actor's ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import ray
import torch

from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout

T = TypeVar("T")


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        end = start + base + (k < extra)
        out.append((start, end))
        start = end
    return out


@dataclass(frozen=True)
class Mode:
    """`scatter(args, replicas)`: each replica's arguments (scatter None: every rank gets the call's own; a share of
    None: that replica is not called); `join(results, shares)`: the called replicas' results, in order, as one."""

    scatter: Callable[[tuple, int], list[tuple | None]] | None
    join: Callable[[list, list[tuple]], Any]


def _rows(args: tuple, ranks: int) -> list[tuple]:
    batch, rest = args[0], args[1:]
    return [(batch.rows(s, e), *rest) for s, e in split(len(batch.prompt_index), ranks)]


def _lists(args: tuple, ranks: int) -> list[tuple]:
    return [tuple(a[s:e] for a in args) for s, e in split(len(args[0]), ranks)]


def _prompts(args: tuple, replicas: int) -> list[tuple | None]:
    """(prompt ids, params_for(share, shares), images or None): each generator its contiguous prompts and its own
    sampling seed (a function of the share, so a resumed iteration draws the same); one with none is not called."""
    prompt_ids, params_for, images = (*args, None)[:3]
    return [
        (prompt_ids[s:e], params_for(r, replicas), *([images[s:e]] if images else [])) if e > s else None
        for r, (s, e) in enumerate(split(len(prompt_ids), replicas))
    ]


def _rollouts(parts: list[Rollout], shares: list[tuple]) -> Rollout:
    """The generators' rollouts as one, each part's prompt indices moved past the shares before it."""
    rollout, start = Rollout(), 0
    for part, share in zip(parts, shares):
        rollout.extend(part, index_offset=start)
        start += len(share[0])
    return rollout


# a SequenceBatch's contiguous rows per rank; the ranks' tensors concatenated
ROWS = Mode(_rows, lambda parts, _: torch.cat(parts))
# an Experience in equal shares (one optimizer step sees every rank's); each rank returns the group's
# averaged metrics, so the first is the group's
EXPERIENCE = Mode(lambda args, ranks: [(part, *args[1:]) for part in args[0].shards(ranks)], lambda parts, _: parts[0])
# parallel lists (queries, prompts, labels) sliced alike; the ranks' scores concatenated
LISTS = Mode(_lists, lambda parts, _: Scored.concat(parts))
# prompts for generation: contiguous shares, each generator seeded apart; the rollouts joined in prompt order
PROMPTS = Mode(_prompts, _rollouts)
# the same call on every rank; every rank's result
EACH = Mode(None, lambda parts, _: list(parts))


def call(workers: list, tp: int, method: Callable, *args: Any) -> "Joined":
    """`method` (a worker method with a `@dispatch` mode) on `workers` (Ray actor handles, in rank order), its
    arguments scattered and its results joined as the mode says; started, not awaited. `tp` consecutive workers
    form one replica (a tensor-parallel group): they take the same share together, and the first one's result
    is the share's."""
    mode, name = method.dispatch, method.__name__  # type: ignore[attr-defined]
    if mode.scatter is None:
        return Joined([getattr(w, name).remote(*args) for w in workers], lambda results: mode.join(results, []))
    shares = mode.scatter(args, len(workers) // tp)
    futures = [getattr(w, name).remote(*shares[r // tp]) for r, w in enumerate(workers) if shares[r // tp] is not None]
    called = [share for share in shares if share is not None]
    return Joined(futures, lambda results: mode.join(results[::tp], called))


def dispatch(mode: Mode) -> Callable[[Callable], Callable]:
    def declare(method: Callable) -> Callable:
        method.dispatch = mode  # type: ignore[attr-defined]
        return method

    return declare


@dataclass
class Joined(Generic[T]):
    """The futures of a call on several actors, joined (in order) once they are all in."""

    futures: list
    join: Callable[[list], T]

    def get(self) -> T:
        return self.join(ray.get(self.futures))
