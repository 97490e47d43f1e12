"""PPO without Ray (`alignment.cli.train_ppo`) on the tiny world, through the real CLI and DeepSpeed.

Each estimator runs end to end and updates the policy in a few iterations; what they learn (held-out
accuracy gains take ~600 iterations, 6-20 min per estimator on one core) is measured by
benchmarks/ppo_learning.py, figures in docs/ppo.md, not asserted here. --dynamic_filtering and --enable_ema:
tests/test_ppo_filtering_and_ema.py."""

from __future__ import annotations

import json

import pytest
import torch

from alignment.errors import EXIT_TRANSIENT
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import launcher, metric_rows, run_module
from tests.ppo_cli import PROMPTS, RULE, SMALL

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("estimator", ["gae", "reinforce", "rloo", "group_norm"])
def test_each_estimator_trains_the_policy(tiny_sft, tmp_path, estimator):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / estimator
    run_module(
        "alignment.cli.train_ppo",
        [
            "--pretrain",
            str(tiny_sft),
            "--save_path",
            str(out),
            *PROMPTS,
            *RULE,
            "--advantage_estimator",
            estimator,
            "--n_samples_per_prompt",
            "4",
            "--rollout_batch_size",
            "8",
            "--micro_rollout_batch_size",
            "32",
            "--train_batch_size",
            "32",
            "--micro_train_batch_size",
            "16",
            "--max_samples",
            "8",
            "--num_episodes",
            "3",
            "--actor_learning_rate",
            "1e-4",
            "--critic_learning_rate",
            "1e-4",
            "--init_kl_coef",
            "0",
        ],
    )
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3] and all(0 <= r["train/reward"] <= 1 for r in rows), rows
    assert ("train/value_loss" in rows[0]) == (estimator == "gae")  # a critic for gae only
    AutoModelForCausalLM.from_pretrained(out)  # committed, plain HF
    before, after = load_file(tiny_sft / "model.safetensors"), load_file(out / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the updates reached the committed weights


def test_gae_with_a_trained_reward_model_and_resume(tiny_sft, tiny_rm, tmp_path):
    """gae (actor + critic + RM; the critic committed too, --save_value_network), then the same run killed
    after iteration 2's checkpoint and resumed with --load_checkpoint: the resumed run redoes only iteration 3
    and ends with the uninterrupted run's weights (every random choice is seeded from the iteration number)."""
    from safetensors.torch import load_file

    rm = tiny_rm
    out = tmp_path / "ppo"
    args = [
        "--pretrain",
        str(tiny_sft),
        "--reward_pretrain",
        str(rm),
        "--normalize_reward",
        *PROMPTS,
        *SMALL,
        "--n_samples_per_prompt",
        "2",
        "--critic_learning_rate",
        "1e-4",
    ]
    run_module("alignment.cli.train_ppo", [*args, "--save_path", str(out), "--critic.save_value_network"])
    rows = metric_rows(out)
    assert len(rows) == 3 and all("train/value_loss" in r and "train/kl" in r for r in rows)
    assert json.loads((out / "MANIFEST.json").read_text())
    # --save_value_network: the trained critic beside the actor, a reward-model folder with its value head
    from alignment.models.reward_model import load_reward_model

    critic = load_reward_model(str(out / "critic"), torch.float32, "sdpa", 0)
    assert critic.config.value_head_prefix == "score"  # --value_head_prefix, OpenRLHF's default

    part, ckpt = tmp_path / "ppo_resumed", tmp_path / "ckpt"
    resumable = [*args, "--save_path", str(part), "--save_steps", "1", "--ckpt_path", str(ckpt), "--max_ckpt_num", "2"]
    crashed = run_module("alignment.cli.train_ppo", resumable, env={"ALIGNFLOW_FAIL_AT_STEP": "2"}, check=False)
    assert crashed.returncode != 0 and "simulated failure after step 2" in crashed.stderr
    assert (ckpt / "latest").read_text().strip().endswith("global_step2") and not (part / "MANIFEST.json").exists()
    assert {"MANIFEST.json", "actor", "critic", "state.json"} <= {p.name for p in (ckpt / "global_step2").iterdir()}
    resumed = run_module("alignment.cli.train_ppo", [*resumable, "--load_checkpoint"])
    assert "ran iterations 3..3 of 3" in resumed.stderr, resumed.stderr[-2000:]
    assert [r["step"] for r in metric_rows(part)] == [1, 2, 3]
    assert sorted(p.name for p in ckpt.glob("global_step*")) == ["global_step2", "global_step3"]  # --max_ckpt_num 2
    a, b = load_file(out / "model.safetensors"), load_file(part / "model.safetensors")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_openrlhf_readme_line_under_the_deepspeed_launcher(tiny_sft, tiny_rm, tmp_path):
    """OpenRLHF's README `deepspeed --module openrlhf.cli.train_ppo` line, paths and sizes changed, in
    two processes: actor, critic, ref and RM all in the launcher's process group (ZeRO-3 gathers
    across both ranks during generation), HF generation."""
    from transformers import AutoModelForCausalLM

    out = tmp_path / "ppo"
    proc = run_module(
        "alignment.cli.train_ppo",
        [
            "--pretrain",
            str(tiny_sft),
            "--reward_pretrain",
            str(tiny_rm),
            "--save_path",
            str(out),
            "--micro_train_batch_size",
            "4",
            "--train_batch_size",
            "16",
            "--micro_rollout_batch_size",
            "8",
            "--rollout_batch_size",
            "16",
            "--max_epochs",
            "1",
            "--prompt_max_len",
            "1024",
            "--generate_max_len",
            "16",
            "--zero_stage",
            "3",
            "--bf16",
            "--actor_learning_rate",
            "5e-7",
            "--critic_learning_rate",
            "9e-6",
            "--init_kl_coef",
            "0.01",
            "--prompt_data",
            f"json@{tiny_dir() / 'prompts'}",
            "--input_key",
            "context_messages",
            "--apply_chat_template",
            "--max_samples",
            "32",
            "--normalize_reward",
            "--adam_offload",
            "--flash_attn",
            "--gradient_checkpointing",
            "--logging_steps",
            "1",
            "--num_threads",
            "1",
        ],
        launcher=launcher("deepspeed", 2),
        threads=1,
    )
    assert "world size 2" in proc.stderr, proc.stderr[-2000:]
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2] and all("train/value_loss" in r and "train/kl" in r for r in rows)
    AutoModelForCausalLM.from_pretrained(out)


def test_a_reward_server_that_stays_down_is_a_transient_fault(tiny_sft, tmp_path):
    """Not the user's input: exit 75 (retried by a flow), one line, before any model loads."""
    base = [
        "--pretrain",
        str(tiny_sft),
        "--save_path",
        str(tmp_path / "o"),
        *PROMPTS,
        *SMALL,
        "--train_batch_size",
        "16",
    ]
    proc = run_module(
        "alignment.cli.train_ppo", [*base, "--remote_rm_url", "http://127.0.0.1:9/get_reward"], check=False
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == EXIT_TRANSIENT and len(errors) == 1, proc.stderr[-2000:]
    assert "reward server http://127.0.0.1:9/get_reward unreachable" in errors[0] and "transient" in errors[0]
    assert "Traceback" not in proc.stderr
