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

from prefect.exceptions import TerminationSignal


@asynccontextmanager
async def sigterm_cancels_this_task() -> AsyncIterator[None]:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    got: list[int] = []

    def on_sigterm() -> None:
        got.append(signal.SIGTERM)
        task.cancel()

    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (ValueError, RuntimeError, NotImplementedError):
        # not the main thread (signals go to the main thread only) or no loop signals (Windows): Prefect's
        # own handler stays in place
        yield
        return
    try:
        yield
    except asyncio.CancelledError as e:
        if got:
            raise TerminationSignal(signal.SIGTERM) from e
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)  # Prefect's handler again, for the engine's own teardown
