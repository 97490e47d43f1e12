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


class TransientError(RuntimeError):
    """Marks an error as transient: the same run may succeed later (exit status 75)."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix: printed as one line, exit code 2, no traceback."""
    from alignment.agents.contract import AgentError
    from alignment.config.base import ConfigError
    from alignment.datasets.sources import DataError
    from alignment.models.loading import ModelLoadError
    from alignment.nonfinite import NonFiniteError
    from alignment.rewards.reward_func import RewardError
    from alignment.storage import StorageError
    return (AgentError, ConfigError, DataError, ModelLoadError, NonFiniteError, RewardError, StorageError)
