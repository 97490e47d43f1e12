"""What every `python -m alignment.cli.*` entry point shares: logging and one-line errors."""
from __future__ import annotations

import sys
from typing import Callable

from alignment.errors import EXIT_INPUT, EXIT_TRANSIENT, TransientError, user_errors
from alignment.logs import setup_logging

__all__ = ["run_main", "setup_logging", "user_errors"]


def _close_progress_bars() -> None:
    """An open tqdm bar leaves its line unterminated; close it so the error starts its own line."""
    from tqdm import tqdm
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _close_process_group() -> None:
    """Every rank waits for the others, then closes the group. A rank that exits while rank 0 is still
    writing (batch_inference's non-main ranks after the gather) otherwise tears down gloo's threads
    under a live peer: `terminate called without an active exception`, SIGABRT, and torchrun fails
    a run that succeeded."""
    if "torch" not in sys.modules:   # a CLI that never imported torch has no group to close
        return
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def run_main(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    setup_logging()
    try:
        main(argv)
        _close_process_group()
    except TransientError as e:   # before user_errors: a StoreUnavailable is also a StorageError
        _close_progress_bars()
        print(f"error: {e} (a transient fault: run it again later; a flow retries it)", file=sys.stderr)
        sys.exit(EXIT_TRANSIENT)
    except user_errors() as e:
        _close_progress_bars()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_INPUT)
