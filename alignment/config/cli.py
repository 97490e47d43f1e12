"""Build an argparse CLI from a stage dataclass, read YAML config files, and go back to argv.

Precedence: defaults < `--config FILE.yaml` < flags on the command line. Every field answers to its flat
name and, where OpenRLHF has one, its dotted name (alignment.config.dotted).
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from collections.abc import Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from alignment import storage
from alignment.config.base import ConfigError, did_you_mean
from alignment.config.dotted import nested_to_fields, spellings, to_fields
from alignment.config.stages import StageConfig
from alignment.config.values import coerce, unwrap

T = TypeVar("T")


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


# OpenRLHF flags users paste that alignflow does not build: refused with what to do instead (an
# accepted-and-ignored flag would silently change what a run means).
_DYNAMIC = (
    "token-budget micro-batches are built for the PPO family (train_ppo, train_ppo_ray) only: here drop it "
    "and size --micro_train_batch_size (add --packing_samples so short samples are not padded)"
)
_PTX = (
    "the pre-training (PTX) loss inside PPO is not built: drop --pretrain_data/--ptx_coef, or run an SFT stage "
    "with --pretrain_mode on that data before PPO"
)
OPENRLHF_NOT_BUILT = {
    "--vllm_enable_sleep": "vLLM sleep mode applies to the rollout engines of train_ppo_ray only: drop it here",
    "--deepspeed_enable_sleep": "DeepSpeed sleep (optimizer states to CPU between training passes) is built for "
    "train_ppo_ray's actor and critic only: drop it here",
    "--use_dynamic_batch": _DYNAMIC,
    "--train_max_tokens_per_gpu": _DYNAMIC,
    "--rollout_max_tokens_per_gpu": _DYNAMIC,
    "--pretrain_data": _PTX,
    "--ptx_coef": _PTX,
}
# the same refusals under OpenRLHF's dotted names (v0.10.2+), for those of the flat ones still refused
_DOTTED_NOT_BUILT = {
    "--vllm_enable_sleep": "--vllm.enable_sleep",
    "--deepspeed_enable_sleep": "--ds.enable_sleep",
    "--use_dynamic_batch": "--train.dynamic_batch_enable",
    "--train_max_tokens_per_gpu": "--train.max_tokens_per_gpu",
    "--rollout_max_tokens_per_gpu": "--rollout.max_tokens_per_gpu",
}
OPENRLHF_NOT_BUILT.update(
    {dotted: OPENRLHF_NOT_BUILT[flat] for flat, dotted in _DOTTED_NOT_BUILT.items() if flat in OPENRLHF_NOT_BUILT}
)


# argparse takes only -1 and -.5 for negative numbers; -1e-3 would read as a flag ("expected one
# argument"), hiding the real problem, which the schema's checks name ("--learning_rate -0.001: must be > 0")
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class _Parser(argparse.ArgumentParser):
    """argparse answers a bad flag with its usage block (50 lines for a stage) and exit; here it is one
    ConfigError line like every other input error (the CLI wrapper prints it, exit status 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str):  # type: ignore[override]
        if message.startswith("unrecognized arguments: "):
            unknown = message.split(": ", 1)[1].split()
            flags = [a.split("=", 1)[0] for a in unknown if a.startswith("-")] or unknown
            for flag in flags:
                if flag in OPENRLHF_NOT_BUILT:
                    raise ConfigError(f"{flag}: {OPENRLHF_NOT_BUILT[flag]}")
            known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            hint = did_you_mean(flags[0], known)
            s = "s" if len(unknown) > 1 else ""
            raise ConfigError(f"unrecognized argument{s} {' '.join(unknown)}{hint}; see --help for the flags")
        raise ConfigError(" ".join(message.split()))


_GIVEN = "_spellings_given"


class _Spelled(argparse.Action):
    """Stores (spelling, value) instead of the value: which name set a field is needed to refuse a field given
    under two names (`--zero_stage 2 --ds.zero_stage 3`) and to read a dotted setting (`--ds.param_dtype bf16`)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if not hasattr(namespace, _GIVEN):
            setattr(namespace, _GIVEN, [])
        getattr(namespace, _GIVEN).append((option_string.lstrip("-"), values))


def build_parser(cls: type, prog: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog, description=(cls.__doc__ or "").strip(), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--config",
        default=None,
        help="YAML file with flag values, flat or nested by OpenRLHF's dotted groups (flags given here win)",
    )
    hints = typing.get_type_hints(cls)
    dotted = spellings(cls)
    for f in fields(cls):
        inner, is_list = unwrap(hints[f.name])
        mine = [s for s in dotted.values() if s.field == f.name]
        # --help lists the dotted name first (OpenRLHF's current one), the flat name and aliases after it
        names = [*(f"--{s.name}" for s in mine if s.values is None), f"--{f.name}", *f.metadata.get("aliases", ())]
        for s in mine:
            if s.values is not None:
                words = ", ".join(f"{w} = --{f.name} {str(v).lower()}" for w, v in s.values.items())
                parser.add_argument(
                    f"--{s.name}",
                    dest=f.name,
                    default=argparse.SUPPRESS,
                    action=_Spelled,
                    choices=tuple(s.values),
                    help=f"OpenRLHF's dotted setting for --{f.name}: {words}",
                )
        kw: dict[str, Any] = {
            "dest": f.name,
            "default": argparse.SUPPRESS,
            "help": f.metadata.get("help", ""),
            "action": _Spelled,
        }
        if inner is bool and not is_list:
            # OpenRLHF style: `--bf16` switches on; `--bf16 false` is also accepted (for YAML-ish use).
            kw.update(nargs="?", const=True, type=_bool)
        elif is_list:
            # `--target_modules q_proj v_proj` and `--target_modules q_proj,v_proj` both work.
            kw.update(nargs="+", type=str)
        else:
            kw.update(type=inner)
            if f.metadata.get("choices"):
                kw["choices"] = f.metadata["choices"]
        parser.add_argument(*names, **kw)
    return parser


def load_yaml(cls: type[T], path: str | Path) -> dict[str, Any]:
    """The YAML file's values, checked against the schema (unknown keys are errors)."""
    text = storage.read_text(path) if "://" in str(path) else (Path(path).read_text() if Path(path).is_file() else None)
    if text is None:
        raise ConfigError(f"--config {path}: file not found")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag: value")
    return coerce(cls, nested_to_fields(cls, data, f"--config {path}"), f"--config {path}")


def parse_args(cls: type[T], argv: list[str] | None = None, prog: str | None = None) -> T:
    """Parse flags into a validated `cls` instance; raises ConfigError with a one-line message."""
    argv = sys.argv[1:] if argv is None else argv
    ns = build_parser(cls, prog).parse_args(argv)
    config_file = getattr(ns, "config", None)
    values = load_yaml(cls, config_file) if config_file else {}
    values.update(coerce(cls, to_fields(cls, getattr(ns, _GIVEN, []), "command line"), "command line"))
    cfg = cls(**values)
    validate = getattr(cfg, "validate", None)
    return validate() if validate else cfg


def changed_values(cfg: StageConfig) -> dict[str, Any]:
    """The fields of `cfg` that differ from the schema's defaults (None left out)."""
    out = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if value != default and value is not None:
            out[f.name] = value
    return out


def config_to_argv(cfg: StageConfig) -> list[str]:
    """Flags that reproduce `cfg` (only non-default values)."""
    argv: list[str] = []
    for name, value in changed_values(cfg).items():
        if isinstance(value, bool):
            argv += [f"--{name}"] if value else [f"--{name}", "false"]
        elif isinstance(value, list):
            argv += [f"--{name}", *map(str, value)]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def config_to_yaml(cfg: StageConfig) -> str:
    """A `--config` file that reproduces `cfg` (only non-default values): what a flow's stage job
    reads from its stage directory."""
    return yaml.safe_dump(changed_values(cfg), sort_keys=True, default_flow_style=False)
