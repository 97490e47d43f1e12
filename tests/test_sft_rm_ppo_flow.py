"""The sft-rm-ppo flow for real (Prefect ephemeral API -> Ray jobs on the session's local head ->
DeepSpeed), with tiny budgets: every stage commits, the PPO stage reads the SFT and RM models
from the store, a stage override lands in that stage's manifest, and a second run skips all."""
from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest

from alignment import storage
from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow
from tests.conftest import REPO

pytestmark = pytest.mark.integration

SMALL = dict(sft={"max_steps": 30, "save_steps": 15, "eval_dataset": None, "logging_steps": 5},
             rm={"max_steps": 10, "save_steps": 5, "eval_dataset": None},
             ppo={"max_samples": 32, "num_episodes": 2, "save_steps": 1, "actor_learning_rate": 2e-5})


def demo_module():
    """scripts/demo.py (the README's main command) as a module, for its report."""
    spec = importlib.util.spec_from_file_location("alignflow_demo", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pipeline_commits_every_stage_and_chains_them(ray_head, tmp_path, capsys):
    store = str(tmp_path / "store")
    result = asyncio.run(sft_rm_ppo_flow(run_name="chain", store=store, ray_address=ray_head, **SMALL))
    assert list(result) == ["tiny_base", "sft", "rm", "ppo"] and not any(r["skipped"] for r in result.values())
    assert all(storage.is_committed(r["model_uri"]) for r in result.values())
    ppo = storage.read_manifest(result["ppo"]["model_uri"])["metadata"]["config"]
    assert ppo["pretrain"] == result["sft"]["model_uri"] and ppo["reward_pretrain"] == result["rm"]["model_uri"]
    assert ppo["actor_learning_rate"] == 2e-5 and ppo["advantage_estimator"] == "group_norm"
    assert storage.read_manifest(result["rm"]["model_uri"])["metadata"]["config"]["pretrain"] == result["sft"]["model_uri"]
    stage_dir = result["ppo"]["model_uri"].rsplit("/", 1)[0]
    assert storage.list_committed(f"{stage_dir}/checkpoints") == ["global_step1", "global_step2"]
    assert 0 < result["ppo"]["metrics"]["train/reward"] < 10

    summary = demo_module().report(result, 1.0, tmp_path / "report.json")
    shown = capsys.readouterr().out
    assert "RL reward (RM score per sample, 2 iterations)" in shown and "after RL" in shown
    assert json.loads((tmp_path / "report.json").read_text())["sft_accuracy"] == summary["sft_accuracy"]

    again = asyncio.run(sft_rm_ppo_flow(run_name="chain", store=store, ray_address=ray_head, **SMALL))
    assert all(r["skipped"] for r in again.values())
    assert {k: r["model_uri"] for k, r in again.items()} == {k: r["model_uri"] for k, r in result.items()}
