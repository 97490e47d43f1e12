"""PPO without Ray (`alignment.cli.train_ppo`) on the tiny world, its two options that change what is trained on or
committed: --dynamic_filtering (DAPO's: groups that teach nothing dropped and refilled) and --enable_ema (the average
of the trained weights committed beside the actor, and resumed). The estimators, a trained RM and the DeepSpeed
launcher: tests/test_ppo_integration.py."""

from __future__ import annotations

import pytest

from tests.conftest import metric_rows, run_module
from tests.ppo_cli import GROUP_SMALL, PROMPTS, RULE

pytestmark = pytest.mark.integration


def test_dynamic_filtering_drops_groups_that_teach_nothing_and_refills(tiny_sft, tmp_path):
    """--dynamic_filtering: a reward file gives every sample of an even-answer prompt 1.0 (a group all right:
    zero advantage) and alternates 1, 0 within odd-answer groups (mean 0.5). Only the mixed groups may be
    trained on, so each iteration's reward is exactly 0.5, and the dropped groups were replaced by refills."""
    reward = tmp_path / "parity_reward.py"
    reward.write_text(
        "def reward_func(queries, prompts, labels, **kwargs):\n"
        "    r = [1.0 if int(label) % 2 == 0 else float(i % 2 == 0) for i, label in enumerate(labels)]\n"
        "    return {'rewards': r, 'scores': r}\n"
    )
    out = tmp_path / "dapo"
    run_module(
        "alignment.cli.train_ppo",
        [
            "--pretrain",
            str(tiny_sft),
            "--save_path",
            str(out),
            *PROMPTS,
            "--remote_rm_url",
            str(reward),
            *GROUP_SMALL,
            "--dynamic_filtering",
            "--dynamic_filtering_reward_range",
            "0",
            "1",
            "--save_steps",
            "2",
            "--save_hf_ckpt",
            "--ckpt_path",
            str(tmp_path / "ckpt"),
        ],
    )
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    from transformers import AutoModelForCausalLM  # --save_hf_ckpt: the actor as an HF folder in the checkpoint

    AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "global_step2" / "actor" / "hf")
    for r in rows:
        generated = r["train/dynamic_filtering/prompts_generated"]
        assert r["train/reward"] == pytest.approx(0.5), rows  # no all-right group was trained on
        assert generated > 8 and r["train/dynamic_filtering/refill_rounds"] >= 1, rows
        assert r["train/dynamic_filtering/dropped_fraction"] == pytest.approx(1 - 8 / generated)


def test_ema_is_the_average_of_the_trained_weights_and_resumes(tiny_sft, tmp_path):
    """--enable_ema --ema_beta 0.5 with one optimizer step per iteration: after two iterations the committed
    average is 0.25·θ0 + 0.25·θ1 + 0.5·θ2 (θ0 the start, θ1 the step-1 checkpoint's --save_hf_ckpt copy, θ2 the
    final actor); a run that crashed after iteration 1 and resumed commits the same average."""
    from safetensors.torch import load_file

    common = [
        "--pretrain",
        str(tiny_sft),
        *PROMPTS,
        *RULE,
        "--advantage_estimator",
        "group_norm",
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
        "16",
        "--actor_learning_rate",
        "1e-3",
        "--init_kl_coef",
        "0",
        "--enable_ema",
        "--ema_beta",
        "0.5",
        "--save_steps",
        "1",
        "--save_hf_ckpt",
        "--zero_stage",
        "2",
    ]
    full, ckpt = tmp_path / "full", tmp_path / "full_ckpt"
    run_module("alignment.cli.train_ppo", [*common, "--save_path", str(full), "--ckpt_path", str(ckpt)])
    t0, t1 = (
        load_file(tiny_sft / "model.safetensors"),
        load_file(ckpt / "global_step1" / "actor" / "hf" / "model.safetensors"),
    )
    t2, ema = load_file(full / "model.safetensors"), load_file(full / "ema" / "model.safetensors")
    assert ema.keys() == t2.keys()
    worst = max((ema[k] - (0.25 * t0[k] + 0.25 * t1[k] + 0.5 * t2[k])).abs().max().item() for k in ema)
    moved = max((t2[k] - t0[k]).abs().max().item() for k in ema)
    assert worst < 1e-6 < moved, (worst, moved)
    part, part_ckpt = tmp_path / "part", tmp_path / "part_ckpt"
    crashed = run_module(
        "alignment.cli.train_ppo",
        [*common, "--save_path", str(part), "--ckpt_path", str(part_ckpt)],
        env={"ALIGNFLOW_FAIL_AT_STEP": "1"},
        check=False,
    )
    assert crashed.returncode != 0 and (part_ckpt / "global_step1" / "actor" / "ema.safetensors").exists()
    run_module(
        "alignment.cli.train_ppo",
        [*common, "--save_path", str(part), "--ckpt_path", str(part_ckpt), "--load_checkpoint"],
    )
    resumed = load_file(part / "ema" / "model.safetensors")
    assert max((resumed[k] - ema[k]).abs().max().item() for k in ema) < 1e-6
