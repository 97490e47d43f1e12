"""Results that may still be computing, so independent model calls overlap: Ray futures on the cluster, values
computed on the spot in process, work started on a thread."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, TypeVar

T = TypeVar("T", covariant=True)


class Pending(Protocol[T]):
    """A result that may still be computing (Ray futures), so independent model calls overlap."""

    def get(self) -> T: ...


@dataclass
class Done(Generic[T]):
    """A result computed on the spot (the in-process backend)."""

    value: T

    def get(self) -> T:
        return self.value


@dataclass
class Mapped(Generic[T]):
    """A pending result seen through a function (a rollout as Sampled)."""

    inner: Pending[Any]
    fn: Callable[[Any], T]

    def get(self) -> T:
        return self.fn(self.inner.get())


@dataclass
class Deferred(Generic[T]):
    """A result computed when asked for (an episode pool collects when the iteration needs its samples)."""

    fn: Callable[[], T]

    def get(self) -> T:
        return self.fn()


class Later(Generic[T]):
    """A computation started on a thread now (--async_train: agent episodes while the actor trains)."""

    def __init__(self, fn: Callable[[], T]):
        pool = ThreadPoolExecutor(1, thread_name_prefix="agent-episodes")
        self.future: Future = pool.submit(fn)
        pool.shutdown(wait=False)  # the thread ends with its one task

    def get(self) -> T:
        return self.future.result()
