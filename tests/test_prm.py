"""Process reward models (train_prm): the loss by hand and only at the placeholders, the tiny world's
step labels, a short train_prm run that checkpoints and commits a plain HF model, and
that model scoring responses as a PPO reward source (--reward_pretrain)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from alignment.config.base import ConfigError
from alignment.config.ppo import PPOConfig
from alignment.tiny_world.process_reward import PLACEHOLDER, prm_rows
from tests.conftest import metric_rows, run_module


def test_prm_loss_reads_only_the_placeholders_by_hand():
    from alignment.losses.prm import IGNORE, prm_loss

    torch.manual_seed(0)
    B, T, V, R = 2, 5, 6, [4, 1]  # reward tokens: id 4 is "+", id 1 is "-"
    logits = torch.randn(B, T, V, requires_grad=True)
    places = torch.tensor([[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]], dtype=torch.bool)
    hard = torch.full((B, T), IGNORE)
    hard[0, 1], hard[0, 3], hard[1, 2] = 0, 1, 1  # "+", "-", "-": indices into R
    soft = torch.full((B, T), IGNORE)
    soft[0, 1], soft[0, 3], soft[1, 2] = 0.9, 0.2, 0.5

    def by_hand(targets, is_soft):
        total = 0.0
        for b, t in places.nonzero().tolist():
            z = [logits[b, t, r].item() for r in R]
            log_p = [v - math.log(sum(math.exp(u) for u in z)) for v in z]
            q = targets[b, t].item()
            total += -(q * log_p[0] + (1 - q) * log_p[1]) if is_soft else -log_p[int(q)]
        return total / 3

    for targets, is_soft in ((hard, False), (soft, True)):
        terms = prm_loss(logits, places, targets, R, is_soft)
        assert terms.steps == 3 and abs(terms.loss.item() - by_hand(targets, is_soft)) < 1e-6
        (grad,) = torch.autograd.grad(terms.loss, logits)
        assert torch.all(grad[~places] == 0)  # no other position's logits
        others = [v for v in range(V) if v not in R]
        assert torch.all(grad[places][:, others] == 0)  # nor other tokens' logits at a step
        assert torch.all(grad[places][:, R].abs().sum(-1) > 0)
    # without reward tokens: cross-entropy over the whole vocabulary, the label a token id
    ids = torch.full((B, T), IGNORE)
    ids[0, 1], ids[0, 3], ids[1, 2] = 4, 1, 5
    full = prm_loss(logits, places, ids, None, False)
    lp = logits.detach().log_softmax(-1)
    assert abs(full.loss.item() + (lp[0, 1, 4] + lp[0, 3, 1] + lp[1, 2, 5]).item() / 3) < 1e-6


def test_tiny_world_steps_are_labelled_at_their_placeholders(tiny_base):
    from transformers import AutoTokenizer

    from alignment.config.stages import PRMConfig
    from alignment.datasets.process_reward import PRMTokenizer
    from alignment.losses.prm import IGNORE

    rows = prm_rows(3, seed=0)
    assert [r["label"] for r in rows] == [["+", "+"], ["-", "-"], ["+", "-"]]
    cfg = PRMConfig(placeholder_token=PLACEHOLDER, reward_tokens=["+", "-"], max_len=64)
    t = PRMTokenizer(AutoTokenizer.from_pretrained(tiny_base), cfg)
    for i, row in enumerate(rows):
        cols = t.columns(row, i)
        at = [(tok, target) for tok, target in zip(cols["input_ids"], cols["targets"]) if target != IGNORE]
        assert at == [(t.placeholder_id, float(["+", "-"].index(lab))) for lab in row["label"]]


def test_packed_targets_follow_their_tokens():
    """--packing_samples: each sample's targets land where SFT's packing put its tokens."""
    from alignment.datasets.batch import collate_packed, collate_padded
    from alignment.datasets.process_reward import PRMSample, layout_targets
    from alignment.losses.prm import IGNORE

    samples = [
        PRMSample([5, 6, 7], [IGNORE, 1.0, IGNORE]),
        PRMSample([8, 9], [IGNORE, 0.0]),
        PRMSample([3, 4, 2, 1], [0.0, IGNORE, IGNORE, 1.0]),
    ]
    for tokens in (
        collate_packed([s.as_tokens() for s in samples], torch.bool, 5),
        collate_padded([s.as_tokens() for s in samples], 0),
    ):
        targets = layout_targets(samples, tokens)
        at = tokens.loss_mask.bool()
        assert torch.equal(at, targets != IGNORE)
        by_token = sorted(zip(tokens.input_ids[at].tolist(), targets[at].tolist()))
        assert by_token == [(1, 1.0), (3, 0.0), (6, 1.0), (9, 0.0)]


@pytest.fixture(scope="module")
def prm(tiny_base, module_tmp):
    """A PRM trained 4 steps on the tiny world's two-step sums, checkpointed every 2."""
    work = module_tmp
    for name, n, seed in (("train", 64, 0), ("eval", 12, 1)):
        (work / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prm_rows(n, seed)))
    out, ckpt = work / "prm", work / "prm_ckpt"
    run_module(
        "alignment.cli.train_prm",
        [
            "--pretrain",
            str(tiny_base),
            "--dataset",
            str(work / "train.jsonl"),
            "--eval_dataset",
            str(work / "eval.jsonl"),
            "--input_key",
            "input",
            "--label_key",
            "label",
            "--placeholder_token",
            PLACEHOLDER,
            "--reward_tokens",
            "+",
            "-",
            "--max_len",
            "64",
            "--train_batch_size",
            "8",
            "--micro_train_batch_size",
            "4",
            "--learning_rate",
            "2e-3",
            "--max_steps",
            "4",
            "--save_steps",
            "2",
            "--logging_steps",
            "1",
            "--seed",
            "7",
            "--ckpt_path",
            str(ckpt),
            "--save_path",
            str(out),
        ],
    )
    assert (ckpt / "latest").read_text().strip() == "global_step4"  # resumable, as every stage's checkpoints
    return out


def test_train_prm_commits_a_plain_hf_model(prm, tiny_base):
    from transformers import AutoModelForCausalLM

    manifest = json.loads((prm / "MANIFEST.json").read_text())
    assert manifest["metadata"]["stage"] == "prm" and manifest["metadata"]["config"]["reward_tokens"] == ["+", "-"]
    config = json.loads((prm / "config.json").read_text())
    assert config["prm"] == {"placeholder_token": PLACEHOLDER, "reward_tokens": ["+", "-"]}
    rows = metric_rows(prm)
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4]
    assert all(0 <= r["train/acc"] <= 1 for r in rows if "train/acc" in r)
    assert any("eval/loss" in r and "eval/acc" in r for r in rows)
    model = AutoModelForCausalLM.from_pretrained(prm)  # plain transformers, no alignflow code
    assert model.config.prm["placeholder_token"] == PLACEHOLDER
    trained, base = load_file(prm / "model.safetensors"), load_file(tiny_base / "model.safetensors")
    assert not torch.equal(trained["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])


def test_prm_scores_responses_as_a_reward_source(prm):
    """make_reward finds the PRM from its config.json; each score is the minimum over the response's
    steps of P("+") among {"+", "-"} at the placeholders, one appended where the response has none."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.rewards.scorer import make_reward

    tok = AutoTokenizer.from_pretrained(prm)
    cfg = PPOConfig(pretrain=str(prm), prompt_data="p.jsonl", reward_pretrain=str(prm), normalize_reward=True)
    with pytest.raises(ConfigError, match="a process reward model saves none"):  # the flag would do nothing
        make_reward(cfg, tok, torch.float32, "sdpa", "cpu")
    cfg.normalize_reward = False
    reward = make_reward(cfg, tok, torch.float32, "sdpa", "cpu")
    queries = [
        "What is 3 + 4 - 2? 3 + 4 = 7 # 7 - 2 = 5 #",
        "What is 3 + 4 - 2? 3 + 4 = 8 # 8 - 2 = 6 #",
        f"What is 3 + 4? 3 + 4 = 7{tok.eos_token}",
    ]
    scored = reward(queries, ["What is 3 + 4 - 2?"] * 2 + ["What is 3 + 4?"], [None] * 3)

    model = AutoModelForCausalLM.from_pretrained(prm).eval()
    plus, minus, ph = (tok.convert_tokens_to_ids(t) for t in ("+", "-", PLACEHOLDER))
    for text, score in zip([*queries[:2], "What is 3 + 4? 3 + 4 = 7 #"], scored.rewards.tolist()):
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(ids).logits[0]
        steps = [logits[t, [plus, minus]].softmax(-1)[0].item() for t in (ids[0] == ph).nonzero().flatten()]
        assert len(steps) == (2 if "- 2" in text else 1)
        assert score == pytest.approx(min(steps), abs=1e-5) and 0 < score < 1
    assert torch.equal(scored.rewards, scored.scores)
