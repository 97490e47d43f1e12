"""What a CLI's exit status means, for people and for the stage runner that decides on a retry.

0 done · 2 the input was refused (a flag, file or path to fix; running it again fails the same
way, so a flow never retries it) · 75 a transient fault outside the input (the store, a reward
server or the network stayed down through the call's own retries; EX_TEMPFAIL of sysexits.h):
the flow retries the stage with backoff and it resumes from its last checkpoint · anything else
a crash (retried too).
"""

from __future__ import annotations

EXIT_INPUT = 2
EXIT_TRANSIENT = 75


class UserError(Exception):
    """The user's to fix (a flag, a file, a path, a data row): printed as one line naming the problem and
    the fix, exit status 2, no traceback. Every such error of alignment subclasses it (ConfigError,
    DataError, StorageError, ...), keeping a builtin base (ValueError, RuntimeError) where callers catch that."""


class TransientError(RuntimeError):
    """Marks an error as transient: the same run may succeed later (exit status 75)."""
