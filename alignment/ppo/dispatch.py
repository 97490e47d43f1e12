"""How a call on a model group reaches its ranks, declared once on each worker method (in the spirit of verl's
`@register(dispatch_mode=...)`): `@dispatch(ROWS)` on `ModelWorker.logprobs` says each rank gets its
contiguous rows and the results are concatenated in rank order. The driver calls
`group.call(ModelWorker.logprobs, batch)` (alignment/ppo/groups.py): a reader follows the call to the
worker's method, and the sharding is written here once instead of per method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import torch

from alignment.rewards.scorer import Scored

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
    """`scatter(args, ranks)`: each rank's arguments (None: every rank gets the same); `join`: the ranks'
    results, in rank order, as one."""

    scatter: Callable[[tuple, int], list[tuple]] | None
    join: Callable[[list], Any]


def _rows(args: tuple, ranks: int) -> list[tuple]:
    batch, rest = args[0], args[1:]
    return [(batch.rows(s, e), *rest) for s, e in split(len(batch.prompt_index), ranks)]


def _lists(args: tuple, ranks: int) -> list[tuple]:
    return [tuple(a[s:e] for a in args) for s, e in split(len(args[0]), ranks)]


# a SequenceBatch's contiguous rows per rank; the ranks' tensors concatenated
ROWS = Mode(_rows, torch.cat)
# an Experience in equal shares (one optimizer step sees every rank's); each rank returns the group's
# averaged metrics, so the first is the group's
EXPERIENCE = Mode(lambda args, ranks: [(part, *args[1:]) for part in args[0].shards(ranks)], lambda parts: parts[0])
# parallel lists (queries, prompts, labels) sliced alike; the ranks' scores concatenated
LISTS = Mode(_lists, Scored.concat)
# the same call on every rank; every rank's result
EACH = Mode(None, list)


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
        import ray

        return self.join(ray.get(self.futures))
