"""OpenRLHF's two dialects of one setting: the flat names of <= 0.9 (`--micro_train_batch_size`), which are
the schema's field names and what the code reads, and the dotted, grouped names of 0.10.2+
(`--train.micro_batch_size`, `--ds.zero_stage`, `--actor.num_nodes`), which OpenRLHF's own scripts now use.

Every field declares its dotted spelling in its `opt(dotted=...)`, next to its help and default; this
module reads those declarations for one stage and resolves what a user wrote — a command line, a YAML
file (`train: {micro_batch_size: 4}` or `train.micro_batch_size: 4`), a flow parameter — to field names.
One field given under two spellings is refused: which of `--zero_stage 2 --ds.zero_stage 3` was meant
is a guess, and a guessed ZeRO stage changes what the run does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any, Iterable, Iterator

from alignment.config.base import ConfigError, did_you_mean

DEFAULT_FAMILY = ""  # the supervised stages, inference, chat, serve_rm: OpenRLHF's `--model.*` role


@dataclass(frozen=True)
class Spelling:
    name: str  # "ds.zero_stage": the flag without its dashes
    field: str  # "zero_stage": the schema field it sets
    values: dict[str, Any] | None  # word -> field value, for a dotted setting naming a switch's state


def _names(declared: str | tuple[str, ...] | dict[str, str | tuple[str, ...]], family: str) -> tuple[str, ...]:
    if isinstance(declared, dict):
        declared = declared.get(family, declared.get(DEFAULT_FAMILY, ()))
    return (declared,) if isinstance(declared, str) else tuple(declared)


@cache
def spellings(cls: type) -> dict[str, Spelling]:
    """{dotted name: Spelling} of stage config `cls` (its `dotted_family` picks the per-family names)."""
    family = getattr(cls, "dotted_family", DEFAULT_FAMILY)
    out: dict[str, Spelling] = {}
    for f in fields(cls):
        for name in _names(f.metadata.get("dotted", ()), family):
            if name in out:  # a schema bug, not a user's: two fields would answer to one flag
                raise AssertionError(f"{cls.__name__}: --{name} declared for {out[name].field} and {f.name}")
            out[name] = Spelling(name, f.name, f.metadata.get("dotted_values"))
    return out


@cache
def aliases(cls: type) -> dict[str, str]:
    """{alias without dashes: field} for the flat aliases (`--greedy_sampling` for `--greedy`)."""
    return {a.lstrip("-"): f.name for f in fields(cls) for a in f.metadata.get("aliases", ())}


def dotted_tree(cls: type) -> dict[str, Any]:
    """The dotted names as nested groups, leaves the Spelling: {"train": {"micro_batch_size": Spelling}}
    (the shape a nested YAML file or flow parameter takes)."""
    tree: dict[str, Any] = {}
    for name, spelling in spellings(cls).items():
        *groups, leaf = name.split(".")
        node = tree
        for group in groups:
            node = node.setdefault(group, {})
        node[leaf] = spelling
    return tree


def flatten(values: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`{"train": {"micro_batch_size": 4}}` -> ("train.micro_batch_size", 4). No field holds a mapping,
    so a mapping is always a group. YAML's `micro-batch-size` spelling is read as `micro_batch_size`."""
    for key, value in values.items():
        name = prefix + str(key).replace("-", "_")
        if isinstance(value, dict):
            yield from flatten(value, name + ".")
        else:
            yield name, value


def _translate(spelling: Spelling, value: Any, source: str) -> Any:
    if spelling.values is None:
        return value
    word = str(value).strip()
    if word not in spelling.values:
        raise ConfigError(
            f"{source}: --{spelling.name} {value!r}: alignflow takes {' or '.join(spelling.values)} "
            f"here (--{spelling.field} is the setting it names)"
        )
    return spelling.values[word]


def mixed(first: str, second: str, field: str) -> str:
    both_dotted = "." in first and "." in second
    why = (
        " (OpenRLHF sets them apart; alignflow keeps one value for both: give both the same value, or one)"
        if both_dotted
        else ": use the dotted (OpenRLHF >= 0.10.2) or the flat (<= 0.9) name, not both"
    )
    return f"--{first} and --{second} both set {field}{why}"


def to_fields(cls: type, given: Iterable[tuple[str, Any]], source: str) -> dict[str, Any]:
    """(name, value) pairs under any spelling -> {field: value}. A dotted name that is no flag of the stage is
    refused with the closest one; a flat unknown name is left for the schema's own check (_coerce)."""
    table, alias = spellings(cls), aliases(cls)
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for name, value in given:
        spelling = table.get(name)
        if spelling is None and "." in name:
            raise ConfigError(f"{source}: unknown option --{name}{did_you_mean(name, table, '--')}")
        field = spelling.field if spelling else alias.get(name, name)
        value = _translate(spelling, value, source) if spelling else value
        # OpenRLHF's per-role pairs (--actor.adam.eps, --critic.adam.eps) may repeat one value; anything else is a guess
        same_pair = "." in name and "." in spelled.get(field, "") and out.get(field) == value
        if field in spelled and spelled[field] != name and not same_pair:
            raise ConfigError(f"{source}: {mixed(spelled[field], name, field)}")
        spelled[field] = name
        out[field] = value
    return out


def nested_to_fields(cls: type, values: dict[str, Any], source: str) -> dict[str, Any]:
    """A YAML file's or flow parameter's mapping (flat, dotted or nested keys) -> {field: value}."""
    return to_fields(cls, flatten(values), source)
