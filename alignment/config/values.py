"""Values typed against their schema field wherever they come from: a YAML file, a flow's parameters, the
command line (after argparse). YAML and JSON hand over whatever the text said: `train_batch_size: 8.5` is a
float, `learning_rate: true` a bool, a list where a string belongs a list. Converting those the way Python
does (int(8.5) == 8, float(True) == 1.0) would train on a value nobody wrote, so each is one line naming the
source, the key, the value and the type expected. Numbers must be finite: `--learning_rate inf` or `nan`
trains nothing and says so only after the model loaded.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import fields
from typing import Any

from alignment.config.base import ConfigError, did_you_mean

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_KIND = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
_WANTED = {int: "an integer (int)", float: "a number (float)", str: "a string (str)"}


def unwrap(tp: object) -> tuple[Any, bool]:
    """(inner type, is_list) for Optional[X] / list[X] / X."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return unwrap(args[0])
    if origin is list:
        return typing.get_args(tp)[0], True
    return tp, False


def _got(value: object) -> str:
    if isinstance(value, float) and not value.is_integer():
        return "a fraction"
    return next((name for tp, name in _KIND.items() if isinstance(value, tp)), type(value).__name__)


def _scalar(key: str, value: Any, inner: object, source: str) -> Any:
    """One value of a scalar field of type `inner`, or ConfigError."""
    where = f"{source}: --{key} {value!r}"
    if isinstance(value, dict):
        first = next(iter(value), "")
        raise ConfigError(f"{source}: --{key} takes one value, not a mapping (got {first}: …)")
    if inner is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if isinstance(value, (list, tuple)) or word not in TRUE + FALSE:
            raise ConfigError(f"{where}: expected true or false")
        return word in TRUE
    if inner is str:
        if isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected {_WANTED[str]}, got a list")
        return value
    if inner not in (int, float):
        return value
    if isinstance(value, (bool, list, tuple)):
        raise ConfigError(f"{where}: expected {_WANTED[inner]}, got {_got(value)}")
    if isinstance(value, str):
        try:
            value = float(value) if inner is float or not value.strip().lstrip("+-").isdigit() else int(value)
        except ValueError:
            raise ConfigError(f"{where}: expected {_WANTED[inner]}, got a string") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite {_WANTED[inner].removeprefix('an ').removeprefix('a ')}")
    if inner is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}: expected {_WANTED[int]}, got a fraction")
        return int(value)
    return float(value)


def coerce(cls: type, values: dict[str, Any], source: str) -> dict[str, Any]:
    """`values` (field name -> value) typed as `cls`'s fields; an unknown key, a value of another type or a
    value outside the field's choices is one ConfigError line naming `source`."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown option {key!r}{did_you_mean(key, known, '--')}")
        inner, is_list = unwrap(hints[key])
        if value is None:
            out[key] = None
            continue
        if is_list:
            items = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(i, (dict, list, tuple)) for i in items):
                raise ConfigError(f"{source}: --{key} {value!r} is not a list of {inner.__name__}")
            flat = [p for item in items for p in str(item).split(",") if p != ""]
            value = [_scalar(key, p, inner, source) if inner is not str else p for p in flat]
        else:
            value = _scalar(key, value, inner, source)
        choices = known[key].metadata.get("choices")
        if choices and not is_list and value not in choices:
            raise ConfigError(f"{source}: --{key} {value!r} is not one of {list(choices)}")
        out[key] = value
    return out
