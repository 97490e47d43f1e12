"""Knowledge distillation (train_kd), lora_combiner and --optim muon: the KD loss by hand, a short train_kd
run killed with -9 that resumes from its checkpoint to the weights of a run never killed, the vocabulary-mismatch
refusal, lora_combiner against PEFT's merge_and_unload, and one Muon SFT run."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import kill9_after_step, losses, metric_rows, run_module
from tests.sft_cli import TINY_SFT


def test_kd_loss_is_the_forward_kl_mix_by_hand():
    """(1 - c)·NLL + c·(KL(p_T ‖ p_S) + H(p_T)) over the target tokens, written out position by position."""
    from alignment.losses.kd import kd_loss
    from alignment.losses.nll import sft_loss

    torch.manual_seed(0)
    B, T, V, c = 2, 6, 7, 0.3
    student, teacher = torch.randn(B, T, V, requires_grad=True), torch.randn(B, T, V)
    ids = torch.randint(0, V, (B, T))
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]])
    terms = kd_loss(student, teacher, ids, mask, c)

    nll, cross, kl, n = 0.0, 0.0, 0.0, 0
    for b in range(B):
        for t in range(1, T):  # token t, predicted at position t - 1
            if not mask[b, t]:
                continue
            p_s = student[b, t - 1].detach().double().softmax(-1)
            p_t = teacher[b, t - 1].double().softmax(-1)
            kl_t = sum(p_t[v] * (math.log(p_t[v]) - math.log(p_s[v])) for v in range(V))
            entropy = -sum(p_t[v] * math.log(p_t[v]) for v in range(V))
            nll += -math.log(p_s[ids[b, t]])
            cross += kl_t + entropy
            kl += kl_t
            n += 1
    expected = (1 - c) * nll / n + c * cross / n
    assert abs(terms.loss.item() - expected) < 1e-6
    assert abs(terms.nll.item() - nll / n) < 1e-6 and abs(terms.kl.item() - kl / n) < 1e-6
    assert abs(kd_loss(student, teacher, ids, mask, 0.0).loss.item() - sft_loss(student, ids, mask).item()) < 1e-6
    # the teacher's entropy is a constant: the distillation term's gradient is forward KL's
    (grad,) = torch.autograd.grad(terms.distil, student)
    s, p_t = student[:, :-1].log_softmax(-1), teacher[:, :-1].softmax(-1)
    m = mask[:, 1:, None].float()
    (by_kl,) = torch.autograd.grad((p_t * (p_t.log() - s) * m).sum() / m.sum(), student)
    assert torch.allclose(grad, by_kl, atol=1e-7)
    # a token the student rules out (-inf) and the teacher gives no mass adds nothing, not NaN
    ruled_out = torch.zeros(1, 2, 3)
    ruled_out[0, 0, 2] = float("-inf")
    zero_mass = torch.tensor([[[0.0, 0.0, float("-inf")], [0.0, 0.0, 0.0]]])
    assert torch.isfinite(kd_loss(ruled_out, zero_mass, torch.tensor([[0, 1]]), torch.tensor([[0, 1]]), 0.5).loss)


@pytest.fixture(scope="module")
def teacher(tiny_base, module_tmp):
    """Another tiny model on the student's tokenizer: two layers, other seed."""
    from alignment.tiny_world.base_model import make_base

    return make_base(module_tmp / "teacher", seed=1, config_overrides={"num_hidden_layers": 2})


@pytest.mark.integration
def test_train_kd_commits_and_resumes(tiny_base, teacher, tmp_path):
    out, ckpt = tmp_path / "kd", tmp_path / "kd_ckpt"
    args = [
        "--pretrain",
        str(tiny_base),
        "--teacher_model",
        str(teacher),
        "--kd_coef",
        "0.5",
        "--max_steps",
        "4",
        "--save_steps",
        "2",
        "--ckpt_path",
        str(ckpt),
        "--save_path",
        str(out),
        *TINY_SFT,
    ]
    kill9_after_step("alignment.cli.train_kd", args, 3)  # kill -9 after step 3: its newest checkpoint is step 2
    assert (ckpt / "latest").read_text().strip() == "global_step2" and not (out / "MANIFEST.json").exists()
    resumed = run_module("alignment.cli.train_kd", [*args, "--load_checkpoint", "--teacher_offload"])
    assert "resumed from" in resumed.stderr and "kd: ran optimizer steps 3..4 of 4" in resumed.stderr
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["metadata"]["stage"] == "kd" and manifest["metadata"]["config"]["kd_coef"] == 0.5
    rows = [r for r in metric_rows(out) if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:  # what is logged is the mix of its parts
        assert r["train/loss"] == pytest.approx(0.5 * r["train/gpt_loss"] + 0.5 * r["train/distil_loss"], rel=1e-5)
        assert 0 <= r["train/kd_kl"] < r["train/distil_loss"]
    trained, base = load_file(out / "model.safetensors"), load_file(tiny_base / "model.safetensors")
    assert not torch.equal(trained["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])
    # resumed exactly: the weights of a run that was never killed
    whole = tmp_path / "whole"
    run_module("alignment.cli.train_kd", [*args, "--save_path", str(whole), "--ckpt_path", str(tmp_path / "c2")])
    uninterrupted = load_file(whole / "model.safetensors")
    assert max((trained[k] - uninterrupted[k]).abs().max().item() for k in uninterrupted) < 1e-5


@pytest.mark.integration
def test_a_teacher_replica_answers_what_a_ranks_own_teacher_does(teacher):
    """--teacher_num_nodes: a replica of the teacher's Ray group loads the teacher as a rank does (precision,
    attention) and answers a micro-batch with the same logits; tests/test_distill_flow.py places one on Ray."""
    from alignment.cli.teacher import TeacherReplica
    from alignment.datasets.batch import Batch
    from alignment.trainers.reference import ReferenceModel

    ids = torch.randint(0, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    batch = Batch(ids, torch.ones_like(ids), torch.ones_like(ids), None, 2, [9, 9])
    own = ReferenceModel(str(teacher), torch.float32, "sdpa", "cpu", False, "--teacher_model")
    replica = TeacherReplica(str(teacher), bf16=False, attention="sdpa", trust_remote_code=False)
    assert torch.equal(replica.logits(batch), own.logits(batch))


@pytest.mark.integration
@pytest.mark.parametrize("task", ["CAUSAL_LM", "SEQ_CLS"])
def test_lora_combiner_equals_peft_merge_and_unload(tiny_base, tmp_path, task):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from alignment.models.lora import apply_lora

    def base_model():
        if task == "SEQ_CLS":
            return AutoModelForSequenceClassification.from_pretrained(tiny_base, num_labels=1)
        return AutoModelForCausalLM.from_pretrained(tiny_base)

    torch.manual_seed(0)
    trained = apply_lora(base_model(), 8, 16, 0.0, ["q_proj", "v_proj"], task)
    for name, p in trained.named_parameters():
        if "lora_B" in name or "score" in name:
            torch.nn.init.normal_(p, std=0.1)  # a trained adapter (and value head): the merge changes weights
    trained.save_pretrained(tmp_path / "adapter")
    expected = PeftModel.from_pretrained(base_model(), tmp_path / "adapter").merge_and_unload().state_dict()

    out = tmp_path / "merged"
    run_module(
        "alignment.cli.lora_combiner",
        [
            "--model_path",
            str(tiny_base),
            "--lora_path",
            str(tmp_path / "adapter"),
            "--output_path",
            str(out),
            *(["--is_rm"] if task == "SEQ_CLS" else []),
        ],
    )
    got = load_file(out / "model.safetensors")
    assert (out / "MANIFEST.json").exists() and (out / "tokenizer.json").exists()
    assert set(got) <= set(expected) and "model.layers.0.self_attn.q_proj.weight" in got
    assert all(torch.equal(got[k], expected[k]) for k in got), [k for k in got if not torch.equal(got[k], expected[k])]
    base = load_file(tiny_base / "model.safetensors")
    assert not torch.equal(
        got["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"]
    )


@pytest.mark.integration
def test_sft_with_muon_trains(tiny_base, tmp_path):
    """--optim muon: DeepSpeed's Muon on the block matrices, AdamW on the rest; both halves move."""
    out = tmp_path / "muon"
    proc = run_module(
        "alignment.cli.train_sft",
        [
            "--pretrain",
            str(tiny_base),
            "--save_path",
            str(out),
            "--optim",
            "muon",
            "--max_steps",
            "3",
            "--lr_warmup_ratio",
            "0",
            *TINY_SFT,
        ],
    )
    assert "--optim muon: Muon on 28 block matrices, AdamW on 10 other tensors" in proc.stderr
    curve = losses(out)
    assert len(curve) == 3 and all(math.isfinite(x) for x in curve)
    trained, base = load_file(out / "model.safetensors"), load_file(tiny_base / "model.safetensors")
    for name in ("model.layers.0.mlp.up_proj.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert not torch.equal(trained[name], base[name]), name


def test_a_teacher_group_is_placed_by_alignflow_and_excludes_offload(monkeypatch):
    from alignment.cli.teacher import teacher_side
    from alignment.config import ConfigError, KDConfig, parse_args
    from alignment.distributed.ray_ranks import on_ray
    from alignment.distributed.side_groups import env_name

    line = ["--pretrain", "student", "--teacher_model", "teacher", "--dataset", "d.jsonl", "--save_path", "out"]
    assert teacher_side(parse_args(KDConfig, line)) is None  # a copy of the teacher on every rank
    cfg = parse_args(KDConfig, [*line, "--teacher.num_nodes", "1", "--teacher.num_gpus_per_node", "2"])
    side = teacher_side(cfg)
    assert (side.role, side.replicas, side.kwargs["path"]) == ("teacher", 2, "teacher")
    for var in ("RANK", "WORLD_SIZE", "RAY_ADDRESS", env_name("teacher")):
        monkeypatch.delenv(var, raising=False)
    assert on_ray(cfg, side)  # one rank, no Ray job: still placed on Ray, with its teacher group
    monkeypatch.setenv("RANK", "0")  # under deepspeed / torchrun: no one places the group
    with pytest.raises(ConfigError, match="placed by alignflow, not by torchrun or deepspeed"):
        on_ray(cfg, side)
    monkeypatch.setenv(env_name("teacher"), "train_kd-teacher-0,train_kd-teacher-1")  # a rank run_ranks started
    assert not on_ray(cfg, side)
    with pytest.raises(ConfigError, match="--teacher_offload keeps each rank's copy"):
        parse_args(KDConfig, [*line, "--teacher_num_nodes", "1", "--teacher_offload"])
