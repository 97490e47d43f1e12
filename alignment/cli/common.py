"""What every `python -m alignment.cli.*` entry point shares: logging and one-line errors."""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

from alignment.errors import EXIT_INPUT, EXIT_TRANSIENT, TransientError


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix: printed as one line, exit code 2, no traceback."""
    from alignment.config.base import ConfigError
    from alignment.datasets.sources import DataError
    from alignment.models.loading import ModelLoadError
    from alignment.rewards.reward_func import RewardError
    from alignment.storage import StorageError
    return (ConfigError, DataError, ModelLoadError, RewardError, StorageError)


def setup_logging(force: bool = False) -> None:
    """INFO from rank 0, warnings from the others. `force`: replace handlers a host process
    (a Ray worker) installed before RANK was known."""
    rank = os.environ.get("RANK", "0")
    level = logging.INFO if rank == "0" else logging.WARNING
    logging.basicConfig(level=level, format=f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr, force=force)
    for noisy in ("DeepSpeed", "deepspeed", "httpx", "urllib3", "fsspec", "s3fs", "botocore", "aiobotocore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _close_progress_bars() -> None:
    """An open tqdm bar leaves its line unterminated; close it so the error starts its own line."""
    from tqdm import tqdm
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def run_main(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    setup_logging()
    try:
        main(argv)
    except TransientError as e:   # before user_errors: a StoreUnavailable is also a StorageError
        _close_progress_bars()
        print(f"error: {e} (a transient fault: run it again later; a flow retries it)", file=sys.stderr)
        sys.exit(EXIT_TRANSIENT)
    except user_errors() as e:
        _close_progress_bars()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_INPUT)
