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


def check_store_uri(flag: str, uri: str | None) -> None:
    """An output URI's scheme must name a store fsspec can open here: a typo (ftpx://) or a missing
    driver (gs:// without gcsfs) would otherwise surface only when the trained model is saved."""
    if not uri or "://" not in uri:
        return
    import fsspec   # not torch: the schema stays light for the Prefect layer

    protocol = uri.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise ConfigError(f"{flag} {uri}: unknown storage scheme {protocol}://; use a local path or a store "
                          f"URI such as s3://bucket/path") from None
    except ImportError as e:
        raise ConfigError(f"{flag} {uri}: {protocol}:// needs a package that is not installed ({e})") from None


# Fields that may hold credentials: never written to manifests, artifacts or logs.
SECRET_FIELDS = frozenset({"use_wandb"})


def public_dict(cfg: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: ("***" if k in SECRET_FIELDS and v else v) for k, v in asdict(cfg).items()}
