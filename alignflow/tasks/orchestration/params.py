"""The types of a flow's per-stage overrides (`sft={...}`, `ppo={...}`): one pydantic model per stage,
made from that stage's config schema (every flag a field, its help and default as the description,
choices as a Literal), so `prefect deployment inspect` and the Prefect UI show each stage's fields and
an unknown key is refused when the run is created. The stage's schema checks the values again when
the flow starts. A stage's overrides take its flat names and OpenRLHF's dotted groups nested
(`ppo={"actor": {"num_nodes": 1}, "train": {"batch_size": 8}}`); `overrides()` hands on flat names.

`use_wandb` is only a switch here. Prefect validates a deployment run's parameters against this
schema when the run is created, so an API key given as `use_wandb` is refused *before* the flow run
exists and never reaches Prefect's database (a check inside the flow would come after Prefect had
stored it). The key itself comes from WANDB_API_KEY in the Ray cluster's environment (`use_wandb=env`).
"""

import dataclasses
import types
import typing
from typing import Any, Callable, ClassVar, Literal, Optional, Union

from prefect import Flow
from prefect.exceptions import ParameterTypeError
from prefect.utilities.callables import get_call_parameters
from pydantic import BaseModel, ConfigDict, Field, create_model

from alignment.config import ConfigError, DPOConfig, KDConfig, KTOConfig, OPDConfig, PPOConfig, RMConfig, SFTConfig
from alignment.config.base import did_you_mean
from alignment.config.dotted import Spelling, dotted_tree, nested_to_fields
from alignment.config.evaluate import EvaluateConfig
from alignment.config.inference import BatchInferenceConfig
from alignment.config.values import coerce

WandbSwitch = Literal["offline", "true", "1", "env", "false", "0"]
SWITCHES = ("offline", "true", "1", "env", "false", "0")


class StageOverrides(BaseModel):
    """The base of every stage's overrides model (stage_overrides): `use_wandb` only a switch, no
    keys that are not the stage's flags."""

    model_config = ConfigDict(extra="forbid")
    config_cls: ClassVar[Optional[type]] = None  # the stage's config schema, to read the nested groups with
    use_wandb: Optional[Union[bool, WandbSwitch]] = Field(
        None,
        description="wandb switch only: true/offline/env (the API key comes from WANDB_API_KEY on the Ray "
        "cluster, never from a parameter)",
    )


class DottedGroup(BaseModel):
    """One of OpenRLHF's dotted groups (`train`, `ds`, `actor`, ...) as a nested parameter."""

    model_config = ConfigDict(extra="forbid")


def _field_type(tp: Any, choices: tuple | None) -> Any:
    """Optional[...] of the schema field's type; a list field also takes a comma-separated string (as YAML does)."""
    if choices:
        return Optional[Literal[tuple(choices)]]  # type: ignore[misc]
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) is Union else [tp]
    base = args[0] if len(args) == 1 else Union[tuple(args)]  # type: ignore[misc]
    return Optional[Union[base, str]] if typing.get_origin(base) is list else Optional[base]


def _group_model(config_cls: type, name: str, prefix: str, tree: dict[str, Any]) -> type[BaseModel]:
    """The nested model of one dotted group: its leaves typed as the fields they set."""
    hints = typing.get_type_hints(config_cls)
    facts = {f.name: f.metadata for f in dataclasses.fields(config_cls)}
    members: dict[str, Any] = {}
    for key, node in tree.items():
        if not isinstance(node, Spelling):
            members[key] = (
                Optional[_group_model(config_cls, f"{name}_{key}", f"{prefix}{key}.", node)],
                Field(None, description=f"OpenRLHF's --{prefix}{key}.* flags"),
            )
            continue
        meta = facts[node.field]
        if node.values is not None:
            tp: Any = Optional[Literal[tuple(node.values)]]  # type: ignore[misc]
        elif node.field == "use_wandb":
            tp = Optional[Union[bool, WandbSwitch]]  # a switch here too: keys never go in parameters
        else:
            tp = _field_type(hints[node.field], meta.get("choices"))
        members[key] = (tp, Field(None, description=f"--{node.name} (= {node.field}): {meta.get('help', '')}"))
    return create_model(name, __base__=DottedGroup, **members)


def stage_overrides(config_cls: type, name: str) -> type[BaseModel]:
    """The overrides model of one stage: every field of `config_cls`, unset by default (the recipe or
    the schema default applies), `use_wandb` only a switch; and OpenRLHF's dotted groups, nested."""
    hints = typing.get_type_hints(config_cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        if f.name == "use_wandb":
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        help_text = f.metadata.get("help", "")
        fields[f.name] = (
            _field_type(hints[f.name], f.metadata.get("choices")),
            Field(None, description=f"{help_text} (default: {default!r})".strip()),
        )
    for group, tree in dotted_tree(config_cls).items():
        assert group not in fields, f"{config_cls.__name__}: dotted group {group} is also a field name"
        fields[group] = (
            Optional[_group_model(config_cls, f"{name}_{group}", f"{group}.", tree)],
            Field(None, description=f"OpenRLHF's --{group}.* flags, nested"),
        )
    model = create_model(name, __base__=StageOverrides, __config__=None, **fields)
    model.config_cls = config_cls
    return model


def overrides(value: Optional[Union[BaseModel, dict]]) -> dict[str, Any]:
    """The overrides as a plain dict of field names, with only the keys the user gave (nested dotted
    groups read as the fields they set; a plain dict's are read by the stage's build_config)."""
    if value is None:
        return {}
    if isinstance(value, BaseModel):
        given = value.model_dump(exclude_unset=True)
        config_cls = getattr(value, "config_cls", None)
        return nested_to_fields(config_cls, given, "parameters") if config_cls else given
    return dict(value)


def _as_fields(models: list[type[BaseModel]], value: dict, where: str) -> dict[str, Any]:
    """A parameter's dict read as field names, their values typed (values.coerce: pydantic would take 8.5 as
    an int's 8 and true as a float's 1.0), by the first of its stage schemas that takes it (one line for a
    dotted key of no group, a field given under two spellings, or a value of the wrong type)."""
    error: Optional[ConfigError] = None
    for model in models:
        if getattr(model, "config_cls", None) is None:
            return dict(value)
        try:
            return coerce(model.config_cls, nested_to_fields(model.config_cls, value, where), where)
        except ConfigError as e:
            error = error or e
    raise error  # type: ignore[misc]


def _override_models(tp: Any) -> list[type[BaseModel]]:
    """The overrides models a parameter's annotation admits (`DPOOverrides | KTOOverrides | None`)."""
    args = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    return [a for a in args if isinstance(a, type) and issubclass(a, StageOverrides)]


# parameters naming a run: each is one folder of the store (<store>/<run_name>/<stage>-<hash>, its policy.json)
RUN_NAMES = ("run_name", "promote_to")


def check_run_name(flow: str, name: str, value: str) -> None:
    """A run's name is one folder name under the store: a separator or `..` would put the run's stages outside
    it (`../../escaped`), and an empty name would write into the store's root."""
    bad = not value.strip() or value.startswith(".") or ".." in value or any(c in value for c in "/\\")
    if bad or not value.isprintable():
        raise ConfigError(
            f"{flow}: {name}={value!r}: a run's name is one folder name under the store: not empty, no '/' or "
            f"'\\', no '..', not starting with '.' (e.g. {name}=sft-2026-12)"
        )


def check_parameters(flow: str, hints: dict[str, Any], parameters: dict[str, Any]) -> None:
    """What the parameter schema can't say in one line (pydantic's message for an unknown key is a
    block, `retries: int` takes -1, and a stage value of the wrong type is converted): an override key
    that is no flag of the stage, with the closest ones; a value not of its field's type; a wandb key given
    as a switch; retries below 0; a run name that is no folder name. Raises ConfigError."""
    for name in RUN_NAMES:
        if isinstance(parameters.get(name), str):  # another type: the schema says so
            check_run_name(flow, name, parameters[name])
    for name, value in parameters.items():
        models = _override_models(hints.get(name))
        if models and isinstance(value, dict):
            known = {key for model in models for key in model.model_fields}
            for key in value:
                if key not in known:
                    raise ConfigError(
                        f"{flow}: {name}.{key}: unknown option{did_you_mean(key, known, name + '.')}; "
                        f"the keys are the stage's flag names (--help of its CLI)"
                    )
            value = _as_fields(models, value, f"{flow}: flow parameter {name}")
        switch = overrides(value).get("use_wandb") if isinstance(value, (dict, BaseModel)) else None
        if switch is not None and str(switch).lower() not in SWITCHES:
            raise ConfigError(
                f"{name}.use_wandb looks like an API key; keys never go in flow parameters: set "
                f"WANDB_API_KEY in the environment of the Ray cluster and pass use_wandb=env"
            )
    try:
        negative = int(parameters.get("retries", 0)) < 0
    except (TypeError, ValueError):  # not a number: the schema says so
        negative = False
    if negative:
        raise ConfigError(
            f"{flow}: retries={parameters['retries']}: must be >= 0 (how many times a failed stage "
            f"is run again; 0: never)"
        )


class CheckedFlow(Flow):
    """A flow whose parameters are checked (check_parameters, then Prefect's schema) before its
    direct Python call (`asyncio.run(sft_flow(sft={...}))`) creates the flow run: Prefect itself
    stores the parameters first and validates after, so a key given as `use_wandb` would already be
    in its database. Deployment runs are validated by the Prefect server against the same schema
    before the run is created, and by the flow run (this validate_parameters) when it starts."""

    def validate_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        check_parameters(self.name, typing.get_type_hints(self.fn), parameters)
        try:
            return super().validate_parameters(parameters)
        except ParameterTypeError as e:  # one line, like every other input error
            raise ConfigError(f"{self.name}: bad parameters: {' '.join(str(e).split())[:400]}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        given = {k: v for k, v in kwargs.items() if k not in ("return_state", "wait_for")}
        self.validate_parameters(get_call_parameters(self.fn, args, given))
        return super().__call__(*args, **kwargs)


def checked_flow(**flow_options: Any) -> Callable[[Callable[..., Any]], CheckedFlow]:
    """`@flow(...)` for our flows, as a CheckedFlow."""
    return lambda fn: CheckedFlow(fn=fn, **flow_options)


def _models() -> dict[str, type[BaseModel]]:
    return {
        "SFTOverrides": stage_overrides(SFTConfig, "SFTOverrides"),
        "RMOverrides": stage_overrides(RMConfig, "RMOverrides"),
        "PPOOverrides": stage_overrides(PPOConfig, "PPOOverrides"),
        "DPOOverrides": stage_overrides(DPOConfig, "DPOOverrides"),
        "KTOOverrides": stage_overrides(KTOConfig, "KTOOverrides"),
        "GenerateOverrides": stage_overrides(BatchInferenceConfig, "GenerateOverrides"),
        "KDOverrides": stage_overrides(KDConfig, "KDOverrides"),
        "OPDOverrides": stage_overrides(OPDConfig, "OPDOverrides"),
        "EvaluateOverrides": stage_overrides(EvaluateConfig, "EvaluateOverrides"),
    }


_M = _models()
SFTOverrides, RMOverrides, PPOOverrides = _M["SFTOverrides"], _M["RMOverrides"], _M["PPOOverrides"]
DPOOverrides, KTOOverrides, GenerateOverrides = _M["DPOOverrides"], _M["KTOOverrides"], _M["GenerateOverrides"]
KDOverrides, OPDOverrides, EvaluateOverrides = _M["KDOverrides"], _M["OPDOverrides"], _M["EvaluateOverrides"]


# what an evaluate stage commits (alignment.config.evaluate.HIGHER_IS_BETTER), as a parameter type
MetricName = Literal["accuracy", "mean_reward", "pair_accuracy", "mean_margin", "perplexity", "nll"]


class Gate(BaseModel):
    """A round-based flow's promotion gate: a round's model becomes the policy only if its `evaluate` stage
    beats the current policy's by `margin` on `metric` (lower is better for perplexity and nll)."""

    model_config = ConfigDict(extra="forbid")
    metric: MetricName = Field(
        "accuracy", description="A metric the recipe's evaluate.yaml commits (accuracy: the share answered right)"
    )
    margin: float = Field(0.0, description="How much better the round's model must be (0: at least as good)")
