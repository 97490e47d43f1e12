"""Field helper and the error type every config check raises."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import MISSING, asdict, field, fields
from typing import Any

import fsspec

from alignment.errors import UserError


class ConfigError(UserError, ValueError):
    """A bad flag value. The message names the flag and how to fix it, on one line."""


def opt(
    default: Any = MISSING,
    help: str = "",
    choices: tuple | None = None,
    aliases: tuple[str, ...] = (),
    identity: bool = True,
    path: str | None = None,
    secret: bool = False,
    dotted: str | tuple[str, ...] | dict[str, str | tuple[str, ...]] = (),
    dotted_values: dict[str, Any] | None = None,
    flat: str | None = None,
) -> Any:
    """A config field and every fact about it: its default, the one-line help shown by --help, allowed
    values, and for the orchestrator: `identity` False when it does not change what the stage produces
    (left out of the stage's identity hash: outputs, cadences, trackers, placement); `path` "model",
    "data" or "reward" when it names an input (made absolute, checked to exist, its content
    fingerprinted); `secret` when it may hold a credential (never written to manifests, artifacts, logs).
    `dotted`: OpenRLHF's dotted name(s) of the field since v0.10.2 ("train.micro_batch_size"), or
    {family: names} where a stage family spells it otherwise ({"": "model.model_name_or_path", "ppo":
    "actor.model_name_or_path"}; alignment.config.dotted); `dotted_values` maps the words a dotted flag
    takes to this field's value where OpenRLHF turned a switch into a setting (`--ds.param_dtype bf16` is `--bf16`).
    `flat`: the field's flat name (OpenRLHF <= 0.9's flag) where it differs from its name in its group
    (alignment.config.tree)."""
    meta = {
        "help": help,
        "choices": choices,
        "aliases": aliases,
        "identity": identity,
        "path": path,
        "secret": secret,
        "dotted": dotted,
        "dotted_values": dotted_values,
        "flat": flat,
    }
    if isinstance(default, (list, dict)):
        frozen = default
        return field(default_factory=lambda: type(frozen)(frozen), metadata=meta)
    return field(default=default, metadata=meta)


def _facts(cls_or_cfg: Any) -> dict[str, Any]:
    return {f.name: f.metadata for f in fields(cls_or_cfg)}


def secret_fields(cls_or_cfg: Any) -> frozenset[str]:
    return frozenset(n for n, m in _facts(cls_or_cfg).items() if m.get("secret"))


def not_identity_fields(cls_or_cfg: Any) -> frozenset[str]:
    """Fields left out of a stage's identity: those that don't change its output, and secrets."""
    return frozenset(n for n, m in _facts(cls_or_cfg).items() if m.get("identity") is False or m.get("secret"))


def path_fields(cls_or_cfg: Any) -> dict[str, str]:
    """{field: "model" | "data" | "reward"} for the fields naming an input."""
    return {n: m["path"] for n, m in _facts(cls_or_cfg).items() if m.get("path")}


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """' (did you mean --learning_rate?)' for the closest of the `known` names (difflib), or ''."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def check_store_uri(flag: str, uri: str | None) -> None:
    """An output URI's scheme must name a store fsspec can open here: a typo (ftpx://) or a missing
    driver (gs:// without gcsfs) would otherwise surface only when the trained model is saved."""
    if not uri or "://" not in uri:
        return

    protocol = uri.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise ConfigError(
            f"{flag} {uri}: unknown storage scheme {protocol}://; use a local path or a store "
            f"URI such as s3://bucket/path"
        ) from None
    except ImportError as e:
        raise ConfigError(f"{flag} {uri}: {protocol}:// needs a package that is not installed ({e})") from None


def public_dict(cfg: Any) -> dict[str, Any]:
    """The config as a dict, its secret fields masked (manifests, artifacts, logs)."""

    secret = secret_fields(cfg)
    return {k: ("***" if k in secret and v else v) for k, v in asdict(cfg).items()}
