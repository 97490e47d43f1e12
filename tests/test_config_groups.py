"""A stage config is a tree of declared groups (alignment.config.tree): `cfg.train.micro_batch_size`,
`cfg.actor.num_nodes`; the groups are declared, typed and frozen classes, every field has one place, the place
follows OpenRLHF's dotted name, and no code outside the schema reads a config's flat fields."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pickle
import typing

import pytest

from alignment.config import (
    BatchInferenceConfig,
    DPOConfig,
    EvaluateConfig,
    KDConfig,
    KTOConfig,
    LoraCombinerConfig,
    OPDConfig,
    PPOConfig,
    PRMConfig,
    RMConfig,
    SFTConfig,
    TinyBaseConfig,
    load_yaml,
    parse_args,
)
from alignment.config.dotted import spellings
from alignment.config.serving import ChatConfig, ServeRMConfig
from alignment.config.tools import ImportModelConfig
from alignment.config.tree import places, stage_groups
from tests.conftest import REPO

STAGES = (
    SFTConfig,
    PRMConfig,
    RMConfig,
    DPOConfig,
    KTOConfig,
    PPOConfig,
    KDConfig,
    OPDConfig,
    BatchInferenceConfig,
    ChatConfig,
    ServeRMConfig,
    EvaluateConfig,
    TinyBaseConfig,
    ImportModelConfig,
    LoraCombinerConfig,
)
FLAT_FIELDS = {f.name for cls in STAGES for f in dataclasses.fields(cls)}
GROUPS = {g for cls in STAGES for g in stage_groups(cls)}


def test_both_dialects_read_back_through_the_groups():
    flat = ["--pretrain", "m", "--prompt_data", "p.jsonl", "--actor_num_nodes", "2", "--zero_stage", "3"]
    dotted = ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p.jsonl", "--actor.num_nodes", "2"]
    for argv in (flat, [*dotted, "--ds.zero_stage", "3"]):
        more = ["--micro_train_batch_size", "2", "--n_samples_per_prompt", "4", "--remote_rm_url", "http://127.0.0.1:1"]
        cfg = parse_args(PPOConfig, [*argv, *more])
        assert (cfg.actor.num_nodes, cfg.ds.zero_stage, cfg.train.micro_batch_size) == (2, 3, 2)
        assert cfg.rollout.n_samples_per_prompt == 4 and cfg.model.model_name_or_path == "m"
        assert cfg.data.prompt_dataset == "p.jsonl" and cfg.actor.adam.lr == cfg.actor_learning_rate


def test_groups_are_typed_frozen_and_follow_the_fields():
    cfg = SFTConfig(pretrain="m", dataset="d.jsonl", lora_rank=8)
    lora = cfg.ds.lora
    assert typing.get_type_hints(type(lora))["rank"] is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        lora.rank = 4
    assert cfg.ds is cfg.ds  # built once
    assert dataclasses.replace(cfg, lora_rank=4).ds.lora.rank == 4
    cfg.lora_rank = 2  # a set field: the groups are built again from the new values
    assert cfg.ds.lora.rank == 2 and pickle.loads(pickle.dumps(cfg)).ds.lora.rank == 2
    assert pickle.loads(pickle.dumps(cfg.ds)) == cfg.ds  # a group can travel to a Ray actor
    with pytest.raises(AttributeError, match="'actor'"):
        cfg.actor  # noqa: B018 (SFT has no actor)


@pytest.mark.parametrize("cls", STAGES, ids=lambda c: c.__name__)
def test_every_group_is_a_declared_class(cls):
    """An editor and a type checker see each group's class where it is declared: not built at run time."""
    for name, klass in stage_groups(cls).items():
        module = importlib.import_module(klass.__module__)
        assert getattr(module, klass.__qualname__) is klass, (cls.__name__, name)
        assert dataclasses.is_dataclass(klass) and klass.__dataclass_params__.frozen
        assert typing.get_type_hints(cls)  # every leaf's type resolves


@pytest.mark.parametrize("cls", STAGES, ids=lambda c: c.__name__)
def test_every_field_has_one_place_named_by_its_dotted_flag(cls):
    places_ = places(cls)
    assert set(places_) == {f.name for f in dataclasses.fields(cls)} and len(set(places_.values())) == len(places_)
    hints = typing.get_type_hints(cls)
    cfg = cls.__new__(cls)  # every group readable from a config: values as the defaults give them
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        object.__setattr__(cfg, f.name, None if default is dataclasses.MISSING else default)
    for name, path in places_.items():
        node = cfg
        for part in path:
            node = getattr(node, part)
        assert node == getattr(cfg, name), (name, path)
        klass = stage_groups(cls)[path[0]]
        for part in path[1:-1]:  # down the subgroups to the leaf's group
            klass = {f.name: f.metadata.get("subgroup") for f in dataclasses.fields(klass)}[part]
        assert typing.get_type_hints(klass)[path[-1]] == hints[name]
    if getattr(cls, "dotted_family", "") == "":  # a field sits where its (first) dotted flag names it
        first: dict = {}
        for spelling in spellings(cls).values():
            first.setdefault(spelling.field, spelling)
        for name, spelling in first.items():
            *group, leaf = spelling.name.split(".")
            assert places_[name] == (*group, leaf if spelling.values is None else name), spelling


def _flat_reads(path) -> list[str]:
    """`cfg.<flat field>`, `self.cfg.<flat field>`, `x_cfg.<flat field>` and getattr(cfg, "<flat field>")."""

    def is_config(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "cfg" or node.id.endswith("_cfg")
        return isinstance(node, ast.Attribute) and node.attr == "cfg"

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and is_config(node.value) and node.attr in FLAT_FIELDS - GROUPS:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and is_config(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in FLAT_FIELDS
        ):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}(.., {node.args[1].value!r})")
    return found


def test_no_code_outside_the_schema_reads_flat_fields():
    """The flat fields are the schema's (flags, YAML, identity); everything else reads the groups."""
    files = [
        p
        for top in ("alignment", "alignflow", "benchmarks", "scripts")
        for p in sorted((REPO / top).rglob("*.py"))
        if p.relative_to(REPO).parts[:2] != ("alignment", "config")
    ]
    assert len(files) > 150
    reads = [hit for p in files for hit in _flat_reads(p)]
    assert not reads, "\n".join(reads)


def test_the_guides_example_reads_what_it_says(monkeypatch):
    """docs/configuration.md's "Reading a config in Python" block runs, and its comments hold."""
    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("## Reading a config in Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(REPO)
    scope: dict = {}
    exec(compile(block, "docs/configuration.md", "exec"), scope)
    cfg = scope["cfg"]
    assert (cfg.actor.num_nodes, cfg.rollout.n_samples_per_prompt, cfg.ds.zero_stage, cfg.ds.lora.rank) == (
        cfg.actor_num_nodes,
        cfg.n_samples_per_prompt,
        cfg.zero_stage,
        cfg.lora_rank,
    )


# Each shipped tiny recipe's stage identity (its store folder's name) as the flat schema of 9ddf49d hashed it: a
# store committed before the config became a tree is still recognised, stage by stage. The content fingerprints
# of local data are left out (they are keyed by absolute path, so they differ between checkouts; the data's
# content is not what changed): the config part is what this pins.
COMMITTED = {
    "tiny/tiny_base.yaml:tiny_base": "7e7ada515b11",
    "tiny/sft.yaml:sft": "ea1a44ec16f1",
    "tiny/rm.yaml:rm": "5a897a418685",
    "tiny/ppo.yaml:ppo": "b830cfe50ce2",
    "tiny/grpo.yaml:ppo": "11abd62d29d9",
    "tiny/dpo.yaml:dpo": "1a5a9f3eba3f",
    "tiny/kto.yaml:kto": "9ecbf30d0f71",
    "tiny/kd.yaml:kd": "d8489553a1c2",
    "tiny/opd.yaml:opd": "1797432f7983",
    "tiny/evaluate.yaml:evaluate": "0a57cac032ec",
    "tiny-vision/sft.yaml:sft": "bad25ed64d33",
    "tiny-vision/dpo.yaml:dpo": "8d766288d20a",
}


@pytest.mark.parametrize("recipe", sorted(COMMITTED))
def test_a_store_committed_by_the_flat_schema_is_still_recognised(recipe, monkeypatch):
    from alignflow.tasks.orchestration import stage_spec

    monkeypatch.chdir(REPO)  # the recipes name their data relative to the checkout
    monkeypatch.setattr(stage_spec, "fingerprint", lambda spec: {})
    path, stage = recipe.split(":")
    cls = stage_spec.STAGES[stage].config
    cfg = cls(**load_yaml(cls, f"deployments/recipes/{path}"))
    assert stage_spec.identity_hash(stage, cfg, {"x": "s3://b/x"}) == COMMITTED[recipe]


def test_the_guides_tree_is_sfts():
    """docs/configuration.md draws SFTConfig's tree: every group, subgroup and what each is composed of."""
    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("```text\n  SFTConfig\n", 1)[1].split("```", 1)[0]
    drawn = [line.strip(" │├└─") for line in block.splitlines() if line.strip()]

    def parts(klass: type) -> str:
        names = [b.__name__ for b in klass.__bases__ if b is not object]
        return f" = {' + '.join(names)}" if names else ""

    def line(name: str, klass: type) -> str:
        return f"{name}: {klass.__name__}{parts(klass)}"

    want = []
    for name, klass in stage_groups(SFTConfig).items():
        want.append(line(name, klass))
        want += [line(f.name, f.metadata["subgroup"]) for f in dataclasses.fields(klass) if f.metadata.get("subgroup")]
    assert [" ".join(d.split()) for d in drawn] == want


def test_the_schemas_own_checks_read_the_tree():
    """A check reads `self.ds.lora.rank`, as every other reader does; a flat field is only written, by a
    `resolve_*` that derives it before the checks run (one spelling per fact in code: the leaf's)."""
    reads = []
    for path in sorted((REPO / "alignment" / "config").glob("*.py")):
        checkers = [  # a group's own methods read its leaves (`Rollout.samples`): not these
            c
            for c in ast.parse(path.read_text()).body
            if isinstance(c, ast.ClassDef) and not any("frozen=True" in ast.unparse(d) for d in c.decorator_list)
        ]
        for node in (n for c in checkers for n in ast.walk(c)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and isinstance(node.ctx, ast.Load)
                and node.attr in FLAT_FIELDS - GROUPS
            ):
                reads.append(f"{path.relative_to(REPO)}:{node.lineno}: self.{node.attr}")
    assert not reads, "\n".join(reads)
