"""SIGTERM during a flow lands at an `await` of the flow's own task.

Prefect's SIGTERM handler raises `TerminationSignal` wherever the main thread happens to be. In an event loop
that is often a callback or another task's step: asyncio logs a BaseException raised there and goes on
(`Handle._run` re-raises only KeyboardInterrupt and SystemExit), so the flow ran to its end; or it is a C
extension's import, which then aborts the interpreter. Through the loop's own signal handling the signal only
wakes the loop, which cancels the flow's task at its current `await`; the flow raises `TerminationSignal`
from there, and Prefect's engine handles it as it handles its own (a crash, or the runner's cancellation).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from prefect.exceptions import TerminationSignal

# the flows of this process inside the context (concurrent flows share one loop registration: a second
# flow that saved the first one's handler as "previous" would otherwise restore it when it ends, leaving
# SIGTERM swallowed in the process, and its forked workers, for good)
_state: dict[str, Any] = {"tasks": set(), "loop": None, "previous": None, "got": False}


def _on_sigterm() -> None:
    _state["got"] = True
    for task in _state["tasks"]:
        task.cancel()


@asynccontextmanager
async def sigterm_cancels_this_task() -> AsyncIterator[None]:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    if not _state["tasks"]:  # the first flow: route SIGTERM through this loop
        previous = signal.getsignal(signal.SIGTERM)
        try:
            loop.add_signal_handler(signal.SIGTERM, _on_sigterm)
        except (ValueError, RuntimeError, NotImplementedError):
            # not the main thread (signals go to the main thread only) or no loop signals (Windows): Prefect's
            # own handler stays in place
            yield
            return
        _state.update(loop=loop, previous=previous, got=False)
    elif _state["loop"] is not loop:  # a flow on another loop meanwhile: its signals stay Prefect's
        yield
        return
    _state["tasks"].add(task)
    try:
        yield
    except asyncio.CancelledError as e:
        if _state["got"]:
            raise TerminationSignal(signal.SIGTERM) from e
        raise
    finally:
        _state["tasks"].discard(task)
        if not _state["tasks"]:  # the last flow: Prefect's handler again, for the engine's own teardown
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _state["previous"])
