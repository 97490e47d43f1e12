"""Ctrl-C (SIGINT) or SIGTERM of a stage CLI ends with one line: what the run committed, which checkpoint a
rerun resumes from, and the command that continues — not a KeyboardInterrupt traceback.

SIGTERM (`kill`, a Ray job being stopped, a scheduler's preemption) is handled like Ctrl-C, so the run's
`finally` blocks still run (the staged output is removed, the output's lease released) and the exit status
is the shell's convention for the signal: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType
from typing import Any

from alignment import storage

_STARTED = time.time()
_run: dict[str, Any] = {}  # the running stage's outputs, recorded by preflight.check_outputs
_signal = {"number": signal.SIGINT}


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _signal["number"] = signum
    raise KeyboardInterrupt


def _default_sigterm_in_child() -> None:
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def install() -> None:
    """SIGTERM raises KeyboardInterrupt like Ctrl-C does (main thread only: Python delivers signals there).

    A forked child (🤗 datasets' --dataset_num_proc pool) gets the default SIGTERM back at the fork. Its pool
    stops it with SIGTERM, and a Python-level handler runs only between bytecodes: a worker that got the
    signal just before blocking on the pool's queue lock slept there for good, and the CLI with it (its
    pool joins the worker). A KeyboardInterrupt there would also print a stray traceback."""
    signal.signal(signal.SIGTERM, _on_sigterm)


os.register_at_fork(after_in_child=_default_sigterm_in_child)  # a no-op in a child of a process without install()


def record(flag: str, output: str | None, ckpt_path: str | None, checkpoints: bool) -> None:
    """What an interrupted run reports on: its output (--save_path or --output_path) and, when it writes
    checkpoints, their folder."""
    _run.update(flag=flag, save_path=output, ckpt_path=ckpt_path if checkpoints else None)


def outputs() -> list[tuple[str, str | None]]:
    """(flag, path) of what the running stage writes, as recorded (a full disk names one: cli/disk.py)."""
    return [(_run.get("flag", "--save_path"), _run.get("save_path")), ("--ckpt_path", _run.get("ckpt_path"))]


def exit_status() -> int:
    return 128 + int(_signal["number"])


def _committed_by_this_run(uri: str) -> bool:
    if storage.is_remote(uri):  # an object's time is the store's clock, not ours: an interrupt that lands
        return False  # after the final commit (rare) is then reported as "nothing committed"
    manifest = os.path.join(uri.removeprefix("file://"), storage.MANIFEST)
    return os.path.exists(manifest) and os.path.getmtime(manifest) >= _STARTED


def line() -> str:
    """The one line an interrupted CLI prints."""
    name = "SIGTERM" if _signal["number"] == signal.SIGTERM else "Ctrl-C"
    save, ckpt, flag = _run.get("save_path"), _run.get("ckpt_path"), _run.get("flag", "--save_path")
    if not save:
        return f"interrupted ({name}) before any output was named: nothing committed"
    command = "the same command"
    try:
        if _committed_by_this_run(save):
            return f"interrupted ({name}) after this run committed {flag} {save}: nothing to redo"
        latest = storage.get_latest(ckpt, "global_step") if ckpt else None
    except storage.StorageError as e:  # the store is why it hung: say what we know
        return f"interrupted ({name}): this run committed nothing at {flag} {save}; the store did not answer ({e})"
    if latest:
        return (
            f"interrupted ({name}): this run committed nothing at {flag} {save}; its newest checkpoint is "
            f"{latest}: run {command} with --load_checkpoint to resume from it"
        )
    how = "no checkpoint was committed yet" if ckpt else "this run writes no checkpoints (--save_steps/--save_minutes)"
    return f"interrupted ({name}): this run committed nothing at {flag} {save}; {how}, so {command} starts over"
