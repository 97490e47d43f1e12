"""Sparse MoE: the router load-balancing loss on hand-computed numbers, and a tiny Mixtral trained
through the real CLIs with --aux_loss_coef (ZeRO-3 in two processes, the MoE blocks as leaves)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from alignment.losses.moe import load_balancing_loss
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import launcher, metric_rows, run_module

LN3 = math.log(3.0)


def test_balance_loss_hand_computed():
    # two tokens, two experts, top-1: softmax([ln 3, 0]) = [0.75, 0.25]
    split = torch.tensor([[LN3, 0.0], [0.0, LN3]])  # token 1 -> expert 0, token 2 -> expert 1
    same = torch.tensor([[LN3, 0.0], [LN3, 0.0]])  # both -> expert 0
    # balanced: f = [0.5, 0.5], P = [0.5, 0.5] -> 2 * (0.25 + 0.25) = 1.0 (= top_k)
    assert load_balancing_loss((split,), top_k=1).item() == pytest.approx(1.0)
    # collapsed: f = [1, 0], P = [0.75, 0.25] -> 2 * 0.75 = 1.5
    assert load_balancing_loss((same,), top_k=1).item() == pytest.approx(1.5)
    # padding is not counted: only token 1 is real -> f = [1, 0], P = [0.75, 0.25]
    assert load_balancing_loss((split,), top_k=1, token_mask=torch.tensor([1, 0])).item() == pytest.approx(1.5)
    # layers are pooled: one balanced + one collapsed layer -> f = [0.75, 0.25], P = [0.625, 0.375]
    assert load_balancing_loss((split, same), top_k=1).item() == pytest.approx(2 * (0.75 * 0.625 + 0.25 * 0.375))
    # top-2 of 2 experts sends every token everywhere: f = [1, 1], P = [0.5, 0.5] -> 2 * 1 = 2
    assert load_balancing_loss((split,), top_k=2).item() == pytest.approx(2.0)


def test_balance_loss_has_a_gradient_toward_balance():
    logits = torch.tensor([[1.0, 0.0], [1.0, 0.0]], requires_grad=True)
    load_balancing_loss((logits,), top_k=1).backward()
    assert (logits.grad[:, 0] > 0).all() and (logits.grad[:, 1] < 0).all()  # descent lowers the crowded expert


@pytest.fixture(scope="module")
def tiny_mixtral(module_tmp) -> Path:
    from alignment.tiny_world.base_model import make_base

    return make_base(module_tmp / "mixtral", seed=0, arch="mixtral")


@pytest.mark.integration
def test_tiny_mixtral_sft_zero3_two_ranks_logs_aux_loss(tiny_mixtral, tmp_path):
    out = tmp_path / "sft"
    proc = run_module(
        "alignment.cli.train_sft",
        [
            "--pretrain",
            str(tiny_mixtral),
            "--save_path",
            str(out),
            "--dataset",
            f"json@{tiny_dir() / 'sft'}",
            "--input_key",
            "context_messages",
            "--apply_chat_template",
            "--multiturn",
            "--max_len",
            "64",
            "--packing_samples",
            "--train_batch_size",
            "16",
            "--micro_train_batch_size",
            "8",
            "--max_steps",
            "8",
            "--learning_rate",
            "2e-3",
            "--zero_stage",
            "3",
            "--num_threads",
            "1",
            "--logging_steps",
            "1",
            "--aux_loss_coef",
            "0.01",
        ],
        launcher=launcher("deepspeed", 2),
        threads=1,
    )
    assert "ZeRO-3 leaf modules: MixtralSparseMoeBlock" in proc.stderr
    rows = [r for r in metric_rows(out) if "train/aux_loss" in r]
    assert len(rows) == 8
    # 4 experts, top-2: a balanced router gives 2.0, total collapse 4.0 (E x the largest slot share, 1)
    assert all(1.5 < r["train/aux_loss"] <= 4.0 for r in rows), rows
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]
    state = load_file(out / "model.safetensors")
    assert any(".experts." in k for k in state) and all(v.numel() > 0 for v in state.values())


PAIRS = [f"json@{tiny_dir() / 'preference'}", "--prompt_key", "prompt", "--apply_chat_template", "--max_len", "64"]
STAGE_ARGS = {
    "dpo": ["--dataset", *PAIRS, "--max_steps", "3", "--learning_rate", "1e-4", "--aux_loss_coef", "0.01"],
    "rm": ["--dataset", *PAIRS, "--max_steps", "3", "--learning_rate", "1e-4", "--model.aux_loss_coef", "0.01"],
    # OpenRLHF's PPO name: --actor.aux_loss_coef; one iteration of 16 samples, 2 optimizer steps
    "ppo": ["--prompt_data", f"json@{tiny_dir() / 'prompts'}", "--input_key", "context_messages", "--label_key",
            "label", "--apply_chat_template", "--remote_rm_url", str(tiny_dir() / "reward_func.py"),
            "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "2", "--rollout_batch_size", "8",
            "--micro_rollout_batch_size", "16", "--max_samples", "8", "--generate_max_len", "8", "--init_kl_coef",
            "0", "--actor.aux_loss_coef", "0.01"],
}  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("stage", sorted(STAGE_ARGS))
def test_tiny_mixtral_logs_aux_loss(tiny_mixtral, tmp_path, stage):
    """The router balance loss of a sparse-MoE model in DPO, the reward model and the PPO actor."""
    out = tmp_path / stage
    run_module(
        f"alignment.cli.train_{stage}",
        [
            "--pretrain",
            str(tiny_mixtral),
            "--save_path",
            str(out),
            "--packing_samples",
            "--train_batch_size",
            "8",
            "--micro_train_batch_size",
            "8",
            "--logging_steps",
            "1",
            *STAGE_ARGS[stage],
        ],
    )
    rows = [r for r in metric_rows(out) if "train/aux_loss" in r]
    assert rows and all(1.5 < r["train/aux_loss"] <= 4.0 for r in rows), rows
