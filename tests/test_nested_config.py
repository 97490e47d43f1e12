"""YAML files and flow parameters may nest OpenRLHF's dotted groups (`train: {batch_size: 4}`): they
make the same config as the flat spelling, and a field given under both names is refused naming both."""

from __future__ import annotations

import pytest
import yaml

from alignment.config import ConfigError, PPOConfig, SFTConfig, parse_args


def _yaml(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_nested_yaml_equals_flat_yaml(tmp_path):
    flat = {
        "pretrain": "M",
        "dataset": "D",
        "micro_train_batch_size": 4,
        "train_batch_size": 8,
        "zero_stage": 2,
        "bf16": True,
        "learning_rate": 1e-5,
        "save_path": str(tmp_path / "out"),
        "lora_rank": 8,
    }
    nested = {
        "model": {"model_name_or_path": "M"},
        "data": {"dataset": "D"},
        "train": {"micro_batch_size": 4, "batch_size": 8},
        "ds": {"zero_stage": 2, "param_dtype": "bf16", "lora": {"rank": 8}},
        "adam": {"lr": 1e-5},
        "ckpt": {"output_dir": str(tmp_path / "out")},
    }
    dotted_keys = {
        "model.model_name_or_path": "M",
        "data.dataset": "D",
        "train.micro_batch_size": 4,
        "train.batch_size": 8,
        "ds.zero_stage": 2,
        "ds.param_dtype": "bf16",
        "adam.lr": 1e-5,
        "ckpt.output_dir": str(tmp_path / "out"),
        "ds.lora.rank": 8,
    }
    configs = [
        parse_args(SFTConfig, ["--config", _yaml(tmp_path, f"{n}.yaml", d)])
        for n, d in (("flat", flat), ("nested", nested), ("dotted", dotted_keys))
    ]
    assert configs[0] == configs[1] == configs[2]
    with pytest.raises(ConfigError, match=r"--ds.zero_stage and --zero_stage"):
        parse_args(SFTConfig, ["--config", _yaml(tmp_path, "mixed.yaml", {**nested, "zero_stage": 3})])


def test_nested_ppo_yaml_and_flow_parameters(tmp_path):
    from alignflow.tasks.orchestration.params import PPOOverrides, check_parameters, overrides

    flat = {
        "pretrain": "M",
        "remote_rm_url": "r.py",
        "prompt_data": "P",
        "actor_num_nodes": 1,
        "advantage_estimator": "group_norm",
        "n_samples_per_prompt": 4,
        "actor_learning_rate": 5e-7,
        "use_wandb": "offline",
    }
    nested = {
        "actor": {"model_name_or_path": "M", "num_nodes": 1, "adam": {"lr": 5e-7}},
        "reward": {"remote_url": "r.py"},
        "data": {"prompt_dataset": "P"},
        "algo": {"advantage": {"estimator": "group_norm"}},
        "rollout": {"n_samples_per_prompt": 4},
        "logger": {"wandb": {"key": "offline"}},
    }
    assert parse_args(PPOConfig, ["--config", _yaml(tmp_path, "flat.yaml", flat)]) == parse_args(
        PPOConfig, ["--config", _yaml(tmp_path, "nested.yaml", nested)]
    )
    # a flow's `ppo={...}` parameter: typed nested groups, handed on as flat field names
    assert overrides(PPOOverrides(**nested)) == flat
    hints = {"ppo": PPOOverrides | None}
    check_parameters("sft-rm-ppo", hints, {"ppo": nested})
    with pytest.raises(ConfigError, match="looks like an API key"):
        check_parameters("sft-rm-ppo", hints, {"ppo": {"logger": {"wandb": {"key": "0123abcd"}}}})
    with pytest.raises(ConfigError, match=r"--actor.num_nodes and --actor_num_nodes"):
        check_parameters("sft-rm-ppo", hints, {"ppo": {**nested, "actor_num_nodes": 1}})


def test_stage_config_from_nested_parameters(tmp_path):
    from alignflow.tasks.orchestration.stage_spec import build_config

    pending = {"pretrain", "dataset"}  # upstream outputs: not checked to exist here
    flat = build_config(
        "sft",
        None,
        {"pretrain": "M", "dataset": "D", "micro_train_batch_size": 2, "train_batch_size": 4, "zero_stage": 0},
        pending=pending,
    )
    nested = build_config(
        "sft",
        None,
        {
            "model": {"model_name_or_path": "M"},
            "data": {"dataset": "D"},
            "train": {"micro_batch_size": 2, "batch_size": 4},
            "ds": {"zero_stage": 0},
        },
        pending=pending,
    )
    assert flat == nested
