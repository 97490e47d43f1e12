"""The `whole_memory` mark: a test that needs the node's memory to itself under pytest-xdist.

CI runs two xdist workers; each runs its own tests beside the other's. A test that starts five model
processes (PPO's actor, critic, reference, reward and a vLLM engine) fits a 24 GB node alone, but not beside
another worker's training run: Ray's memory monitor then kills its workers (CI of 2026-12-07). A marked test
takes this lock exclusively and every other test takes it shared, around its whole run protocol (its fixtures'
set-up and tear-down included, where the models of a module fixture are trained): the marked test waits for
the other worker's current test, and that worker starts nothing until it is done. A second file (the gate)
gives the exclusive holder precedence, so a worker that starts test after test cannot keep it waiting.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _lock_files() -> tuple[Path, Path] | None:
    """The gate and the lock of this xdist run (None outside xdist: one process runs one test at a time)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return None
    base = Path(tempfile.gettempdir()) / f"alignflow-memory-{run}"
    return base.with_suffix(".gate"), base.with_suffix(".lock")


@contextmanager
def memory_share(exclusive: bool) -> Iterator[None]:
    files = _lock_files()
    if files is None:
        yield
        return
    gate_path, lock_path = files
    with open(gate_path, "a") as gate, open(lock_path, "a") as lock:
        if exclusive:
            fcntl.flock(gate, fcntl.LOCK_EX)  # new tests of the other worker now wait at the gate
            fcntl.flock(lock, fcntl.LOCK_EX)  # and the one it runs now finishes first
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
