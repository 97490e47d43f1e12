"""A stage config read by groups, the way OpenRLHF's dotted flags group it: `cfg.train.micro_batch_size`,
`cfg.ds.zero_stage`, `cfg.actor.num_nodes`, `cfg.ds.lora.rank`.

The flat fields stay the schema: they are what a command line, a YAML file and a flow parameter set (under
either dialect, alignment.config.dotted), what a stage's identity hashes (so a store's committed stages are
still recognised after an upgrade) and what the schema's own checks read. Code outside the schema reads a
config through its groups only (tests/test_config_groups.py scans for flat reads), and a function that needs
one group takes that group.

Each field sits where its dotted name puts it for the stage's family (`--actor.model_name_or_path` in PPO is
`cfg.actor.model_name_or_path`, `--model.model_name_or_path` elsewhere is `cfg.model.model_name_or_path`).
A switch OpenRLHF turned into a setting sits under its own name in the setting's group (`--ds.param_dtype
bf16` is `cfg.ds.bf16`). A field OpenRLHF has no dotted name for sits under its flat name in the group its
`opt(group=...)`, or else its declaring class (`own_group`), names: `--max_steps` is `cfg.train.max_steps`.
A group is a frozen, typed dataclass built from the config when it is read: it cannot drift from the
fields, and it cannot be written to (a changed config is a `dataclasses.replace` of the flat fields, whose
checks then run).
"""

from __future__ import annotations

import typing
from dataclasses import fields, make_dataclass
from functools import cache
from typing import Any

from alignment.config.dotted import DEFAULT_FAMILY, _names

Path = tuple[str, ...]


def _own_group(cls: type, name: str) -> str:
    """The `own_group` of the class that declares field `name` (the most derived declaration)."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            group = vars(klass).get("own_group")
            if group is None:  # a schema bug: a field without a place
                raise AssertionError(f"{klass.__name__}.{name}: no dotted name and no own_group for its class")
            return group
    raise AssertionError(f"{cls.__name__}.{name}: declared nowhere")


@cache
def places(cls: type) -> dict[str, Path]:
    """{field: its path} for stage config `cls`: ("train", "micro_batch_size") for micro_train_batch_size."""
    out: dict[str, Path] = {}
    for f in fields(cls):
        names = _names(f.metadata.get("dotted", ()), DEFAULT_FAMILY)
        if names and f.metadata.get("dotted_values"):  # `--ds.param_dtype bf16` sets a switch: cfg.ds.bf16
            where = f"{names[0].rsplit('.', 1)[0]}.{f.name}"
        else:
            where = names[0] if names else f"{f.metadata.get('group') or _own_group(cls, f.name)}.{f.name}"
        out[f.name] = tuple(where.split("."))
    seen: dict[Path, str] = {}
    for name, path in out.items():
        if path in seen:
            raise AssertionError(f"{cls.__name__}: {name} and {seen[path]} both sit at {'.'.join(path)}")
        seen[path] = name
    clash = {p[0] for p in out.values()} & set(dir(cls))
    if clash:  # a field, method or class attribute of that name would hide the group
        raise AssertionError(f"{cls.__name__}: {sorted(clash)} name both a group and an attribute")
    return out


@cache
def _tree(cls: type, path: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The group at `path`: ({leaf: field}, subgroup names)."""
    leaves, subs = {}, []
    for name, where in places(cls).items():
        if where[: len(path)] != path or len(where) == len(path):
            continue
        if len(where) == len(path) + 1:
            leaves[where[-1]] = name
        elif where[len(path)] not in subs:
            subs.append(where[len(path)])
    return leaves, tuple(subs)


def groups(cls: type) -> tuple[str, ...]:
    """The top-level groups of `cls` ("model", "data", "train", "ds", ...)."""
    return _tree(cls, ())[1]


@cache
def group_type(cls: type, path: Path) -> type:
    """The frozen dataclass of group `path` of `cls`: its leaves typed as their fields, its subgroups as groups."""
    leaves, subs = _tree(cls, path)
    hints = typing.get_type_hints(cls)
    spec: list[tuple[str, Any]] = [(leaf, hints[name]) for leaf, name in leaves.items()]
    spec += [(sub, group_type(cls, (*path, sub))) for sub in subs]

    def __reduce__(self: Any) -> tuple:  # pickled by what makes it: the type is built at run time
        return _rebuild, (cls, path, {f: getattr(self, f) for f, _ in spec})

    return make_dataclass(f"{cls.__name__}.{'.'.join(path)}", spec, frozen=True, namespace={"__reduce__": __reduce__})


def _rebuild(cls: type, path: Path, values: dict[str, Any]) -> Any:
    return group_type(cls, path)(**values)


def group(cfg: Any, path: Path) -> Any:
    """Group `path` of `cfg`, read from its fields now."""
    cls = type(cfg)
    leaves, subs = _tree(cls, path)
    values = {leaf: getattr(cfg, name) for leaf, name in leaves.items()}
    values |= {sub: group(cfg, (*path, sub)) for sub in subs}
    return group_type(cls, path)(**values)
