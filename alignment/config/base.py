"""Field helper and the error type every config check raises."""
from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any


class ConfigError(ValueError):
    """A bad flag value. The message names the flag and how to fix it, on one line."""


def opt(default: Any = MISSING, help: str = "", choices: tuple | None = None,
        aliases: tuple[str, ...] = ()) -> Any:
    """A config field: its default, the one-line help shown by --help, allowed values."""
    meta = {"help": help, "choices": choices, "aliases": aliases}
    if isinstance(default, (list, dict)):
        frozen = default
        return field(default_factory=lambda: type(frozen)(frozen), metadata=meta)
    return field(default=default, metadata=meta)


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


# Fields that may hold credentials: never written to manifests, artifacts or logs.
SECRET_FIELDS = frozenset({"use_wandb"})


def public_dict(cfg: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: ("***" if k in SECRET_FIELDS and v else v) for k, v in asdict(cfg).items()}
