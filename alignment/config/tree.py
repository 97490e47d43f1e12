"""The config is a tree of declared groups, the way OpenRLHF's dotted flags group it: `cfg.train.micro_batch_size`,
`cfg.ds.zero_stage`, `cfg.ds.lora.rank`, `cfg.algo.advantage.estimator`.

Each group is a frozen dataclass declared next to the checks of what it configures (`Lora` in config/groups.py,
`Advantage` in config/ppo.py). Its leaves are `opt(...)` fields that carry every fact about a setting: default,
help, choices, OpenRLHF's dotted names, and `flat=` the flat name of OpenRLHF <= 0.9 where it differs from the
leaf's (`micro_batch_size` is `--micro_train_batch_size`). A stage lists its groups (`train = group(SFTTrain)`);
a group that a stage composes from several concerns is a dataclass with those groups as bases, and a group
inside a group is a `subgroup` field.

`@stage` turns the stage into the dataclass of its leaves under their flat names: the shape a command line, a
YAML file and a flow parameter fill in (under either dialect, alignment.config.dotted), and what a stage's
identity hashes, so a store's committed stages are recognised across versions. Every reader, the schema's own
checks included, reads the tree: `cfg.train` is the group's typed, frozen value, built from those fields at its
first read and kept until a field is set, so it cannot drift from them and cannot be written to (a changed
config is a `dataclasses.replace` of the flat fields, whose checks then run). The flat fields are only written:
by the parsers, and by a `resolve_*` that derives one before the checks. tests/test_config_groups.py scans
for flat reads.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from typing import Any, Generic, Iterator, TypeVar, overload

G = TypeVar("G")
Path = tuple[str, ...]
BUILT = "_groups"  # where a config keeps the groups it has built, until one of its fields is set


def subgroup(cls: type[G]) -> G:
    """A group inside a group (`ds.lora`): a field holding the inner group."""
    return field(default_factory=cls, metadata={"subgroup": cls})


class group(Generic[G]):
    """A stage's top-level group: `cfg.train` is the group's value, built from the stage's flat fields."""

    def __init__(self, cls: type[G]) -> None:
        self.cls = cls

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, cfg: None, owner: type) -> "group[G]": ...

    @overload
    def __get__(self, cfg: object, owner: type) -> G: ...

    def __get__(self, cfg: object | None, owner: type | None = None) -> "group[G] | G":
        if cfg is None:
            return self
        built = cfg.__dict__.setdefault(BUILT, {})  # emptied whenever a field is set (StageConfig.__setattr__)
        if self.name not in built:
            built[self.name] = _build(self.cls, cfg)
        return built[self.name]


@cache
def _layout(cls: type) -> tuple[tuple[str, str | type], ...]:
    """(attribute, flat field) for each leaf of group `cls`, (attribute, class) for each subgroup."""
    return tuple((f.name, f.metadata.get("subgroup") or f.metadata.get("flat") or f.name) for f in fields(cls))


def _build(cls: type[G], cfg: object) -> G:
    return cls(**{a: _build(t, cfg) if isinstance(t, type) else getattr(cfg, t) for a, t in _layout(cls)})


def _leaves(cls: type, path: Path) -> Iterator[tuple[str, Path, Field, object]]:
    """(flat name, place, field, type) for every leaf under group `cls` at `path`."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if sub := f.metadata.get("subgroup"):
            yield from _leaves(sub, (*path, f.name))
        else:
            yield f.metadata.get("flat") or f.name, (*path, f.name), f, hints[f.name]


def flat_names(*klasses: type) -> tuple[str, ...]:
    """The flat names of the leaves of groups `klasses` (their flags)."""
    return tuple(flat for klass in klasses for flat, *_ in _leaves(klass, ()))


def stage_groups(cls: type) -> dict[str, type]:
    """{group name: group class} of stage `cls`, in declaration order ("model", "ds", "data", "train", ...)."""
    out: dict[str, type] = {}
    for klass in reversed(cls.__mro__):
        out.update({name: g.cls for name, g in vars(klass).items() if isinstance(g, group)})
    return out


def stage(cls: type) -> type:
    """Make stage class `cls` the dataclass of its groups' leaves under their flat names; each field's
    metadata records where it sits in the tree (`place`)."""
    annotations: dict[str, Any] = {}
    places: dict[Path, str] = {}
    for name, klass in stage_groups(cls).items():
        for flat, place, f, kind in _leaves(klass, (name,)):
            if flat in annotations or place in places:  # a schema bug: two leaves for one flag
                raise AssertionError(f"{cls.__name__}: {flat} declared twice (at {'.'.join(place)})")
            places[place] = flat
            annotations[flat] = kind
            meta = {**f.metadata, "place": place}
            given = {"default": f.default} if f.default is not MISSING else {"default_factory": f.default_factory}
            setattr(cls, flat, field(**given, metadata=meta))
    clash = set(stage_groups(cls)) & set(annotations)
    if clash:
        raise AssertionError(f"{cls.__name__}: {sorted(clash)} name both a group and a field")
    cls.__annotations__ = annotations
    return dataclass(cls)


def places(cls_or_cfg: Any) -> dict[str, Path]:
    """{flat field: its place in the tree}: ("train", "micro_batch_size") for micro_train_batch_size."""
    return {f.name: f.metadata["place"] for f in fields(cls_or_cfg)}
