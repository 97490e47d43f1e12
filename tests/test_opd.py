"""On-policy distillation (train_opd): its two losses by hand (value and gradient), and OpenRLHF's dotted
train_opd command line (sizes and paths aside) sampling from the student, committing a model, logging the
held-out KL, and resuming from its checkpoint after a crash to the weights of a run that never stopped."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from alignment.tiny_world.paths import tiny_dir
from tests.conftest import kill9_after_step, metric_rows, run_module


def test_sampled_token_loss_is_the_reverse_kl_score_function_by_hand():
    from alignment.losses.opd import sampled_token_loss

    torch.manual_seed(0)
    student = torch.randn(2, 4, 5, requires_grad=True)
    teacher = torch.randn(2, 4, 5)
    ids = torch.tensor([[1, 2, 3, 4], [0, 4, 1, 2]])
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]])
    loss, kl = sampled_token_loss(student, teacher, ids, mask, "k3")
    loss.backward()
    s = student.detach().log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    t = teacher.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = mask[:, 1:].float()
    k3 = torch.exp(t - s) - 1 + (s - t)
    assert loss.item() == pytest.approx(((k3 * m).sum() / m.sum()).item(), abs=1e-6) and kl == pytest.approx(
        loss.item()
    )
    # the gradient: (1/N) Σ_t m_t (log π_S - log π_T)(y_t) ∇ log π_S(y_t)
    probe = student.detach().clone().requires_grad_(True)
    logp = probe.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    ((logp * (s - t) * m).sum() / m.sum()).backward()
    assert torch.allclose(student.grad, probe.grad, atol=1e-6)


def test_topk_kl_over_the_whole_vocabulary_is_the_exact_reverse_kl_and_a_bucket_below():
    from alignment.losses.opd import topk_reverse_kl

    torch.manual_seed(1)
    student, teacher = torch.randn(3, 6, 7), torch.randn(3, 6, 7)
    q, p = (student / 2).log_softmax(-1), (teacher / 2).log_softmax(-1)
    exact = (q.exp() * (q - p)).sum(-1)
    assert torch.allclose(topk_reverse_kl(student, teacher, 7, temperature=2.0), exact, atol=1e-6)
    # top 2 plus the rest as one outcome: by hand
    top = q.topk(2, -1).indices
    qk, pk = q.gather(-1, top).exp(), p.gather(-1, top).exp()
    q_rest, p_rest = 1 - qk.sum(-1), 1 - pk.sum(-1)
    by_hand = (qk * (qk.log() - pk.log())).sum(-1) + q_rest * (q_rest.log() - p_rest.log())
    assert torch.allclose(topk_reverse_kl(student, teacher, 2, temperature=2.0), by_hand, atol=1e-6)


@pytest.mark.integration
def test_openrlhf_opd_line_samples_commits_evaluates_and_resumes(tiny_base, tiny_sft, tmp_path):
    prompts = f"json@{tiny_dir()}/prompts"
    out, ckpt = tmp_path / "opd", tmp_path / "opd_ckpt"
    # OpenRLHF's train_opd line (openrlhf.cli -> alignment.cli), sizes and paths shrunk; no launcher: one rank
    line = [
        "--model.model_name_or_path",
        str(tiny_base),
        "--teacher.model_name_or_path",
        str(tiny_sft),
        "--data.prompt_dataset",
        prompts,
        "--data.input_key",
        "context_messages",
        "--data.label_key",
        "label",
        "--data.apply_chat_template",
        "--data.max_samples",
        "32",
        "--data.prompt_max_len",
        "64",
        "--data.max_len",
        "96",
        "--generate.max_new_tokens",
        "12",
        "--generate.temperature",
        "1.0",
        "--generate.top_p",
        "1.0",
        "--eval.dataset",
        prompts,
        "--eval.split",
        "test",
        "--eval.steps",
        "2",
        "--opd.topk",
        "0",
        "--opd.kl_estimator",
        "k3",
        "--train.micro_batch_size",
        "4",
        "--train.batch_size",
        "8",
        "--train.max_epochs",
        "1",
        "--adam.lr",
        "1e-4",
        "--ds.zero_stage",
        "2",
        "--ds.param_dtype",
        "bf16",
        "--ds.attn_implementation",
        "sdpa",
        "--model.gradient_checkpointing_enable",
        "--ckpt.output_dir",
        str(out),
        "--ckpt.path",
        str(ckpt),
        "--ckpt.save_steps",
        "2",
        "--logger.tensorboard_dir",
        str(tmp_path / "runs"),
        "--logger.logging_steps",
        "1",
    ]
    kill9_after_step("alignment.cli.train_opd", line, 3)  # kill -9 after step 3: its newest checkpoint is step 2
    assert (ckpt / "latest").read_text().strip() == "global_step2" and not (out / "MANIFEST.json").exists()
    resumed = run_module("alignment.cli.train_opd", [*line, "--ckpt.load_enable"])
    assert "resumed from" in resumed.stderr and "opd: ran optimizer steps 3..4 of 4" in resumed.stderr
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["metadata"]["stage"] == "opd" and manifest["metadata"]["config"]["opd_kl_estimator"] == "k3"
    train = [r for r in metric_rows(out) if "train/opd_loss" in r]
    evals = [r for r in metric_rows(out) if "eval/kl" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and [r["step"] for r in evals] == [2, 4]
    assert all(0 < r["train/response_length"] <= 12 and r["train/opd_loss"] > 0 for r in train)
    assert all(r["eval/kl"] > 0 and 0 <= r["eval/label_match"] <= 1 for r in evals)
    # the same responses are sampled after the resume: the weights are those of a run that never stopped
    whole = tmp_path / "whole"
    run_module("alignment.cli.train_opd", [*line, "--ckpt.output_dir", str(whole), "--ckpt.path", str(tmp_path / "c2")])
    resumed_w, whole_w = load_file(out / "model.safetensors"), load_file(whole / "model.safetensors")
    assert max((resumed_w[k] - whole_w[k]).abs().max().item() for k in whole_w) < 1e-5
