"""The math behind OpenRLHF v0.11's PPO flags, by hand: the three IS-correction types with LOW HIGH
thresholds (as OpenRLHF's PolicyLoss), ProRL's stop-properly penalty, the entropy bonus's entropy,
--data.max_len's per-prompt response budget, evaluation's pass@n, and the engine turns of partial rollouts."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch

from alignment.losses.nll import token_entropy
from alignment.losses.ppo import is_weights
from alignment.losses.reward_shaping import stop_properly
from alignment.ppo.evaluation import eval_due, eval_metrics
from alignment.rollout.partial import EngineTurns
from alignment.rollout.types import Rollout, SamplingParams

TRAINER = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, -1.0, -1.0]])
ENGINE = torch.tensor([[-1.2, -1.0, -2.0, 0.0], [-1.1, -1.1, -1.1, -1.1]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
# w = exp(trainer - engine): row 0 e^0.2 = 1.221, e^-1 = 0.368, e^1.5 = 4.48; row 1 e^0.1 = 1.105 twice


def test_tis_clamps_each_weight_into_low_high():
    w = is_weights(TRAINER, ENGINE, MASK, 0.5, 2.0, "tis")
    assert w[0].tolist() == pytest.approx([math.exp(0.2), 0.5, 2.0, 0.0])
    assert w[1].tolist() == pytest.approx([math.exp(0.1), math.exp(0.1), 0.0, 0.0])


def test_icepop_drops_tokens_outside_low_high_and_keeps_the_others_unclamped():
    w = is_weights(TRAINER, ENGINE, MASK, 0.5, 2.0, "icepop")
    assert w[0].tolist() == pytest.approx([math.exp(0.2), 0.0, 0.0, 0.0])
    assert w[1].tolist() == pytest.approx([math.exp(0.1), math.exp(0.1), 0.0, 0.0])


def test_seq_mask_tis_drops_whole_sequences_by_their_geometric_mean():
    # row 0's mean log-w over its 3 tokens: (0.2 - 1 + 1.5) / 3 = 0.233 -> 1.26, inside [0.5, 1.2]? no: dropped
    w = is_weights(TRAINER, ENGINE, MASK, 0.5, 1.2, "seq-mask-tis")
    assert w[0].tolist() == pytest.approx([0.0, 0.0, 0.0, 0.0])
    assert w[1].tolist() == pytest.approx([math.exp(0.1), math.exp(0.1), 0.0, 0.0])  # 1.105 inside: w kept
    kept = is_weights(TRAINER, ENGINE, MASK, 0.5, 5.0, "seq-mask-tis")
    assert kept[0].tolist() == pytest.approx([math.exp(0.2), math.exp(-1.0), math.exp(1.5), 0.0])  # not clamped


def test_stop_properly_scales_or_replaces_the_reward_of_cut_responses():
    scores, finished = torch.tensor([1.0, 1.0, 0.5, 0.0]), torch.tensor([True, False, False, True])
    assert stop_properly(scores, finished, 0.5).tolist() == [1.0, 0.5, 0.25, 0.0]
    assert stop_properly(scores, finished, 0.0).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert stop_properly(scores, finished, -0.5).tolist() == [1.0, -0.5, -0.5, 0.0]


def test_token_entropy_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.5, 0.0 + 1e-30], [1.0, 1e-30, 1e-30], [0.25, 0.25, 0.5]]]))
    got = token_entropy(logits)  # [1, 2]: positions 0 and 1 (the last predicts nothing)
    assert got.tolist()[0] == pytest.approx([math.log(2), 0.0], abs=1e-6)


def test_max_len_gives_each_prompt_the_rest_of_it():
    p = SamplingParams(100, max_total_len=64)
    assert [p.budget(n) for n in (10, 60, 63, 70)] == [54, 4, 1, 1]
    assert SamplingParams(16, max_total_len=64).budget(10) == 16  # --generate_max_len caps it
    assert SamplingParams(16).budget(1000) == 16


def test_eval_metrics_pass1_and_pass_n():
    rollout = Rollout(
        [[1]] * 6, [[5, 2], [5], [5, 5, 2], [5], [5], [5]], [0, 0, 0, 1, 1, 1], [True, False, True, False, False, False]
    )
    m = eval_metrics(torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0]), 3, rollout)
    assert m["pass1"] == pytest.approx(2 / 6) and m["pass3"] == pytest.approx(0.5)
    assert m["response_length"] == pytest.approx(9 / 6) and m["truncated"] == pytest.approx(4 / 6)
    assert [eval_due(5, i, 12) for i in (5, 6, 12)] == [True, False, False]
    assert [eval_due(-1, i, 12) for i in (5, 12)] == [False, True]


def test_weights_posted_while_the_engine_generates_wait_for_the_holder_and_the_newest_wins():
    loaded: list = []
    turns = EngineTurns(lambda parts: loaded.append(parts) or len(parts))
    assert turns.post(["v1"]) is True and loaded == [["v1"]]  # free engine: applied at once
    turns.claim()  # a generation holds the engine
    assert turns.post(["v2"]) is False and turns.post(["v3"]) is False and loaded == [["v1"]]
    assert turns.apply_pending() is True and loaded[-1] == ["v3"]  # between two steps; v2 was superseded
    assert turns.apply_pending() is False
    turns.post(["v4"])
    turns.release()  # posted after the last step: applied before the engine is let go
    assert loaded[-1] == ["v4"] and not turns.busy


def test_a_second_generation_waits_for_the_first():
    turns = EngineTurns(lambda parts: 0)
    order: list[str] = []
    turns.claim()

    def second():
        turns.claim()
        order.append("second")
        turns.release()

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.2)
    order.append("first")
    turns.release()
    t.join(5)
    assert order == ["first", "second"]


def test_the_best_evaluation_so_far_and_the_metric_it_follows():
    from alignment.config import ConfigError, PPOConfig, parse_args
    from alignment.ppo.evaluation import BestSoFar

    best = BestSoFar("pass1")
    assert [best.improved({"pass1": v}) for v in (0.2, 0.1, 0.2, 0.3)] == [True, False, False, True]
    assert best.value == 0.3 and not BestSoFar(None).improved({"pass1": 1.0})
    base = ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p", "--reward.remote_url", "r.py"]
    ev = [*base, "--eval.dataset", "e", "--eval.n_samples_per_prompt", "4"]
    assert parse_args(PPOConfig, [*ev, "--ckpt.save_steps", "2"]).best_metric() == "pass1"  # OpenRLHF's auto
    assert parse_args(PPOConfig, ev).best_metric() is None  # no checkpoints to keep
    for key, name in (("eval_default_pass4", "pass4"), ("eval/pass1", "pass1"), ("none", None)):
        cfg = parse_args(PPOConfig, [*ev, "--ckpt.save_steps", "2", "--ckpt.best_metric_key", key])
        assert cfg.best_metric() == name
    with pytest.raises(ConfigError, match="the evaluation logs pass1 and pass4"):
        parse_args(PPOConfig, [*ev, "--ckpt.save_steps", "2", "--ckpt.best_metric_key", "pass8"])
    with pytest.raises(ConfigError, match="add --save_steps N"):
        parse_args(PPOConfig, [*ev, "--ckpt.best_metric_key", "pass1"])


def test_oversampling_feeds_the_dynamic_filter_under_async():
    from alignment.config import ConfigError, PPOConfig, parse_args

    base = ["--actor.model_name_or_path", "m", "--data.prompt_dataset", "p", "--reward.remote_url", "r.py",
            "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "2", "--train.batch_size", "8"]  # fmt: skip
    on = [*base, "--train.async_enable", "--vllm.num_engines", "1", "--algo.dynamic_filtering_enable"]
    assert parse_args(PPOConfig, [*on, "--rollout.vllm_generate_batch_size", "6"]).oversampled() == 2
    assert parse_args(PPOConfig, base).oversampled() == 0
    with pytest.raises(ConfigError, match="oversamples for --dynamic_filtering under --async_train"):
        parse_args(PPOConfig, [*base, "--rollout.vllm_generate_batch_size", "6"])
    with pytest.raises(ConfigError, match="below --rollout_batch_size"):
        parse_args(PPOConfig, [*on, "--rollout.vllm_generate_batch_size", "2"])
