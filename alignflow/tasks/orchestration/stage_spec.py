"""What a stage is to the orchestrator: its CLI module, its config schema, where its output goes.

Torch-free: this runs in the Prefect process; the stage itself runs in a Ray job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from alignment import storage
from alignment.config import (
    BatchInferenceConfig,
    ConfigError,
    DPOConfig,
    KDConfig,
    KTOConfig,
    LoraCombinerConfig,
    OPDConfig,
    PPOConfig,
    PRMConfig,
    RMConfig,
    SFTConfig,
    TinyBaseConfig,
)
from alignment.config.base import not_identity_fields, path_fields, secret_fields
from alignment.config.cli import load_yaml
from alignment.config.dotted import nested_to_fields
from alignment.config.evaluate import EvaluateConfig
from alignment.config.stages import StageConfig
from alignment.config.tracking import WANDB_SWITCHES
from alignment.config.values import coerce
from alignment.fingerprint import fingerprint


@dataclass(frozen=True)
class StageKind:
    module: str  # python -m <module> runs the stage
    config: type  # its config dataclass
    resumable: bool  # takes --ckpt_path / --load_checkpoint
    output_field: str = "save_path"  # the flag naming its output directory


STAGES: dict[str, StageKind] = {
    "tiny_base": StageKind("alignment.cli.make_tiny_base", TinyBaseConfig, resumable=False),
    "sft": StageKind("alignment.cli.train_sft", SFTConfig, resumable=True),
    "rm": StageKind("alignment.cli.train_rm", RMConfig, resumable=True),
    "dpo": StageKind("alignment.cli.train_dpo", DPOConfig, resumable=True),
    "kto": StageKind("alignment.cli.train_kto", KTOConfig, resumable=True),
    "prm": StageKind("alignment.cli.train_prm", PRMConfig, resumable=True),
    "kd": StageKind("alignment.cli.train_kd", KDConfig, resumable=True),
    "opd": StageKind("alignment.cli.train_opd", OPDConfig, resumable=True),
    "lora_combiner": StageKind(
        "alignment.cli.lora_combiner", LoraCombinerConfig, resumable=False, output_field="output_path"
    ),
    # the PPO family places its own model groups on the stage's Ray cluster (train_ppo_ray)
    "ppo": StageKind("alignment.cli.train_ppo_ray", PPOConfig, resumable=True),
    # generate / score / post-process; its "model" directory holds output.jsonl
    "batch_inference": StageKind(
        "alignment.cli.batch_inference", BatchInferenceConfig, resumable=False, output_field="output_path"
    ),
    # one held-out measurement of one model; its "model" directory holds evaluation.json
    "evaluate": StageKind("alignment.cli.evaluate", EvaluateConfig, resumable=False, output_field="output_path"),
}

SUPPORTED_SCHEMES = ("file", "s3")
DEFAULT_SAVE_MINUTES = 30.0  # a flow stage's checkpoint cadence when the config sets none
PLANNED_STAGE_DIR = "memory://alignflow-planned/stage"  # a stand-in while planning: its identity is not known yet


def check_store(store: str) -> str:
    """Normalise the store URI: absolute for local paths; only file:// and s3:// are supported."""
    if "://" in store:
        scheme = store.split("://", 1)[0]
        if scheme not in SUPPORTED_SCHEMES:
            raise ConfigError(
                f"store {store!r}: unsupported scheme {scheme!r}; use a local path, file:// or s3://bucket/prefix"
            )
        if scheme == "file":
            return "file://" + os.path.abspath(store.removeprefix("file://"))
        return store.rstrip("/")
    return os.path.abspath(store)


def check_store_reachable(store: str) -> str:
    """Touch the store once (with the storage module's retries) so a wrong endpoint, bucket or
    credential fails now, with the URI in the message, instead of inside a Ray job."""

    storage.check_reachable(store)
    return store


def absolute_input(spec: str) -> str:
    """Local relative paths made absolute (the Ray job runs in another directory): relative to
    the current directory if they exist there, else the shipped data and deployments (`data/tiny/sft`,
    as the recipes name them, is alignflow.data's `tiny/sft`, in a checkout and an installed wheel alike)."""
    parts = []
    for item in spec.split(","):
        prefix, _, path = item.rpartition("@") if "@" in item and "://" not in item.split("@")[0] else ("", "", item)
        if path and "://" not in path and not os.path.isabs(path):
            top, _, rest = path.partition("/")
            for candidate in (Path.cwd() / path, shipped(top, rest) if top in SHIPPED else None):
                if candidate is not None and candidate.exists():
                    path = str(candidate)
                    break
        parts.append(f"{prefix}@{path}" if prefix else path)
    return ",".join(parts)


def build_config(
    stage: str, config_file: str | None, overrides: dict[str, Any] | None, pending: set[str] = frozenset()
) -> StageConfig:
    """The stage config from an optional YAML file plus parameter overrides, validated. `pending`:
    fields naming an upstream stage's output that is not committed yet (its existence is not checked)."""
    if stage not in STAGES:
        raise ConfigError(f"unknown stage {stage!r}; known stages: {sorted(STAGES)}")
    cls = STAGES[stage].config
    values = load_yaml(cls, config_file) if config_file else {}
    source = f"{stage} parameters"  # flat, dotted or nested by OpenRLHF's groups ({"train": {"batch_size": 8}})
    values.update(coerce(cls, nested_to_fields(cls, dict(overrides or {}), source), source))
    for name in path_fields(cls):
        if isinstance(values.get(name), str):
            values[name] = absolute_input(values[name])
    if values.get("use_tensorboard") and STAGES[stage].resumable:
        raise ConfigError(
            f"{stage}: use_tensorboard={values['use_tensorboard']!r}: in a flow every stage writes its "
            f"TensorBoard events into its output (<stage dir>/model/tensorboard); drop use_tensorboard"
        )
    check_inputs(stage, values, {k: v for k, v in path_fields(cls).items() if k not in pending})
    use_wandb = values.get("use_wandb")
    if use_wandb and str(use_wandb).lower() not in WANDB_SWITCHES:
        raise ConfigError(
            f"{stage}: use_wandb looks like an API key; keys never go in flow parameters: set "
            f"WANDB_API_KEY in the environment of the Ray cluster and pass use_wandb=env"
        )
    cfg = cls(**values)
    # the job writes into its stage folder (job_config), wherever the recipe's save_path/ckpt_path point:
    # check the outputs the job will have (the default ./ckpt/checkpoints nests in ./ckpt; the job's don't)
    job_config(stage, cfg, PLANNED_STAGE_DIR).validate()
    return cfg


_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def check_inputs(stage: str, values: dict[str, Any], paths: dict[str, str]) -> None:
    """Every input a stage names exists before anything starts: local files and folders, store URIs
    (one request each), data specs that parse and hub names that are names."""
    from alignment.datasets.sources import DataError, resolve

    for name, what in paths.items():
        value = values.get(name)
        if not isinstance(value, str) or not value or what == "reward":
            continue  # a reward source may be a URL: the job checks it
        for item in value.split(",") if what == "data" else [value]:
            kind, location = "dir", item
            if what == "data":
                try:
                    source = resolve(item)
                except DataError as e:
                    raise ConfigError(f"{stage}: --{name}: {e}") from None
                kind, location = source.kind, source.location
            if kind != "hub" and ("://" in location or os.path.isabs(location)):
                if not storage.exists(location):
                    raise ConfigError(f"{stage}: --{name} {location}: does not exist; fix the path or URI")
            elif not _HUB_NAME.match(location):
                raise ConfigError(
                    f"{stage}: --{name} {location!r}: neither an existing path nor a hub name "
                    f"(ORG/NAME); fix the path or the name"
                )


def identity_hash(stage: str, cfg: StageConfig, inputs: dict[str, str] | None = None) -> str:
    """Hash of what determines the stage's output: its config (less the fields the schema marks
    identity=False, and secrets), input URIs, and the content of the local files its other path
    fields name (alignment/fingerprint.py). An input (an upstream stage's committed output) counts by
    its URI, which holds the upstream's own identity, so a flow knows every stage's output URI
    before it runs (alignflow/tasks/orchestration/pipeline.py)."""
    skip = not_identity_fields(cfg)
    ident = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in skip}
    content = {}
    for name in path_fields(cfg):
        if name in (inputs or {}):
            continue
        value = getattr(cfg, name, None)
        if isinstance(value, str) and (prints := fingerprint(value)):
            content[name] = prints
    blob = json.dumps(
        {"stage": stage, "config": ident, "inputs": inputs or {}, **({"content": content} if content else {})},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def stage_dir(store: str, run_name: str, stage: str, digest: str) -> str:
    """Layout: <store>/<run_name>/<stage>-<hash>/{model, checkpoints}."""
    return f"{store.rstrip('/')}/{run_name}/{stage}-{digest}"


def job_config(stage: str, cfg: StageConfig, out_dir: str, run_name: str = "") -> StageConfig:
    """The config the Ray job runs with: outputs under the stage dir, resume switched on; trackers
    that follow the pipeline: TensorBoard events inside the committed output, wandb runs grouped by
    pipeline run and named `<run>-<stage>` unless the config names them."""
    changes: dict[str, Any] = {STAGES[stage].output_field: f"{out_dir}/model"}
    if STAGES[stage].resumable:
        if cfg.ckpt.save_steps == -1 and not cfg.ckpt.save_minutes and not cfg.ckpt.disable_ds:
            changes["save_minutes"] = DEFAULT_SAVE_MINUTES  # so that a retried stage always resumes
        changes.update(
            ckpt_path=f"{out_dir}/checkpoints",
            load_checkpoint=True,
            use_tensorboard=f"{out_dir}/model/tensorboard",
            wandb_group=cfg.logger.wandb.group or run_name or None,
            wandb_run_name=cfg.logger.wandb.run_name or (f"{run_name}-{stage}" if run_name else None),
        )
    return replace(cfg, **changes)


def config_summary(cfg: StageConfig) -> dict[str, Any]:
    secret = secret_fields(cfg)
    return {k: v for k, v in asdict(cfg).items() if k not in secret}


# the checkout's top-level folders the package ships as data (pyproject.toml's package-dir)
SHIPPED = {"data": "alignflow.data", "deployments": "alignflow.deployments"}


def shipped(folder: str, *parts: str) -> Path:
    """A file of the shipped data or deployments, found with importlib.resources (the package's, installed or
    editable), never through this file's location."""
    return Path(str(resources.files(SHIPPED[folder]))).joinpath(*filter(None, parts))
