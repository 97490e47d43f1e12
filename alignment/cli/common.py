"""What every `python -m alignment.cli.*` entry point shares: the wandb key moved out of argv,
logging and one-line errors."""

from __future__ import annotations

import os
import sys
from typing import Callable

from alignment.cli import interrupt
from alignment.cli.disk import disk_full
from alignment.config.tracking import WANDB_SWITCHES
from alignment.errors import EXIT_INPUT, EXIT_TRANSIENT, TransientError, UserError
from alignment.lease import release_all
from alignment.logs import setup_logging

__all__ = ["run_main", "setup_logging"]


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
    if "torch" not in sys.modules:  # a CLI that never imported torch has no group to close
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# (flag, its shortest unambiguous prefix): argparse also takes a prefix (--use_wand KEY); --use_ is ambiguous,
# as is --logger.wandb. (org, group, project). The dotted spelling is OpenRLHF's since v0.10.2.
_WANDB_FLAGS = (("--use_wandb", "--use_w"), ("--logger.wandb.key", "--logger.wandb.k"))


def _is_wandb_flag(arg: str) -> bool:
    return any(len(arg) >= len(shortest) and flag.startswith(arg) for flag, shortest in _WANDB_FLAGS)


def argv_without_wandb_key(args: list[str]) -> tuple[list[str], str | None]:
    """`args` with the value of `--use_wandb KEY` (or `--use_wandb=KEY`, `--logger.wandb.key KEY`) replaced by
    `env`, and the key; (args, None) when no key is given (a switch such as `offline` or `env` stays as it is)."""
    out, key = list(args), None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not _is_wandb_flag(flag):
            continue
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                continue  # no value: argparse reports it
            value = args[i + 1]
        if not value or value.lower() in WANDB_SWITCHES:
            continue
        key = value
        if eq:
            out[i] = f"{flag}=env"
        else:
            out[i + 1] = "env"
    return out, key


def _reexec_without_wandb_key() -> None:
    """/proc/<pid>/cmdline is readable by every user of the machine for as long as the process lives,
    its environment only by its owner. A key given as `--use_wandb KEY` goes into WANDB_API_KEY and the
    process replaces itself (same PID, so a launcher's bookkeeping holds) with the same interpreter,
    interpreter options (-m, -X, -u) and arguments, the key's place taken by `env`. The key stays
    visible only from the interpreter's start to here; a launcher (deepspeed, torchrun) keeps its own argv."""
    args, key = argv_without_wandb_key(sys.argv[1:])
    tail = sys.orig_argv[len(sys.orig_argv) - len(args) :] if args else []
    if key is None or tail != sys.argv[1:]:  # no key, or sys.argv was rewritten in-process: not ours to re-run
        return
    os.environ["WANDB_API_KEY"] = key
    # sys.orig_argv (3.10+): the interpreter's own command line, options and `-m module` before sys.argv[1:]
    head = sys.orig_argv[: len(sys.orig_argv) - len(args)]
    sys.stdout.flush()
    sys.stderr.flush()
    # argv[0] is the absolute interpreter path: Python finds its venv from it, not from a bare "python"
    os.execv(sys.executable, [sys.executable, *head[1:], *args])


def run_main(main: Callable[[list[str] | None], object], argv: list[str] | None = None) -> None:
    if argv is None:  # argv from the command line (a list given by a caller was never on it)
        _reexec_without_wandb_key()
    setup_logging()
    interrupt.install()
    try:
        main(argv)
        _close_process_group()
    except TransientError as e:  # before UserError: a StoreUnavailable is also a StorageError
        _close_progress_bars()
        print(f"error: {e} (a transient fault: run it again later; a flow retries it)", file=sys.stderr)
        sys.exit(EXIT_TRANSIENT)
    except UserError as e:
        _close_progress_bars()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (interrupt.install): one line, not a traceback
        _close_progress_bars()
        print(interrupt.line(), file=sys.stderr)
        sys.exit(interrupt.exit_status())
    except Exception as e:  # a full disk is the user's to fix, not a crash to retry (cli/disk.py); the rest re-raise
        full = disk_full(e, interrupt.outputs())
        if full is None:
            raise
        _close_progress_bars()
        print(f"error: {full}", file=sys.stderr)
        sys.exit(EXIT_INPUT)
    finally:
        release_all()  # the output's lease (alignment/lease.py), taken by preflight.check_outputs
