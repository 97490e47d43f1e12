"""--use_dynamic_batch in the PPO family: micro-batches cut by a token budget give the same log-probs,
values and optimizer step as fixed row counts (two gloo ranks with ZeRO-2, cut differently on each
rank), while computing fewer padded tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from alignment.ppo.token_budget import TokenBudget, split_to
from tests.test_loss_aggregation import on_two_ranks
from tests.test_ppo_packing import batch_of

# (prompt, response) lengths: a few long rows among short ones, as sampled responses come
LENGTHS = [
    (4, 30),
    (3, 2),
    (5, 3),
    (4, 1),
    (6, 25),
    (3, 4),
    (5, 2),
    (4, 3),
    (3, 1),
    (6, 2),
    (4, 28),
    (5, 5),
    (3, 3),
    (4, 2),
    (5, 1),
    (6, 4),
]


def test_budget_groups_cover_every_row_once_within_the_budget():
    lengths = [p + r for p, r in LENGTHS]
    for packed in (False, True):
        budget = TokenBudget(64, packed)
        groups = budget.groups(lengths)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        assert all(budget.cost([lengths[i] for i in g]) <= 64 for g in groups)
        assert len(groups) < len(lengths)  # short rows share a micro-batch
    padded = TokenBudget(64, False)
    assert padded.cost([34, 5, 5]) == 102 and TokenBudget(64, True).cost([34, 5, 5]) == 44
    # sorted longest first: the three long rows never pad a micro-batch of short ones
    groups = padded.groups(lengths)
    assert [lengths[i] for i in groups[0]] == [34]
    assert TokenBudget(10, False).groups([30, 2]) == [[0], [1]]  # too long for the budget: alone


def test_split_to_reaches_the_count_of_the_other_ranks():
    groups = [[0, 1, 2, 3], [4], [5, 6]]
    out = split_to(groups, 5)
    assert len(out) == 5 and sorted(i for g in out for i in g) == list(range(7)) and all(out)
    assert split_to(groups, 3) == groups
    with pytest.raises(ValueError, match="7 rows into 8"):
        split_to(groups, 8)


def _cfg(**changes):
    from alignment.config.ppo import PPOConfig

    return dataclasses.replace(
        PPOConfig(),
        **{
            "generate_max_len": 32,
            "prompt_max_len": 8,
            "micro_rollout_batch_size": 4,
            "micro_train_batch_size": 2,
            "train_batch_size": 8,
            "max_epochs": 1,
            **changes,
        },
    )


def test_dynamic_log_prob_and_value_passes_equal_fixed_ones(tiny_base):
    from transformers import AutoModelForCausalLM

    from alignment.models.reward_model import ValueCapture, load_reward_model
    from alignment.ppo import rank_ops
    from alignment.ppo.packed import Packing

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation="sdpa")
    critic = load_reward_model(str(tiny_base), torch.float32, "sdpa", pad_token_id=0)
    b = batch_of(LENGTHS)
    fixed, dynamic = _cfg(), _cfg(use_dynamic_batch=True, train_max_tokens_per_gpu=64)
    for packing in (None, Packing(torch.bool)):
        want, got = rank_ops.logprobs(model, b, fixed, packing), rank_ops.logprobs(model, b, dynamic, packing)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
        v_want = rank_ops.values(critic, ValueCapture(critic), b, fixed, packing)
        v_got = rank_ops.values(critic, ValueCapture(critic), b, dynamic, packing)
        assert torch.allclose(v_got, v_want, atol=1e-5), (v_got - v_want).abs().max()
    # what the padded passes compute: 4 fixed micro-batches of 4 rows each padded to its longest row,
    # against micro-batches of similar lengths within 64 tokens
    lengths = b.attention_mask.sum(-1).tolist()
    cost = TokenBudget(10**9, False).cost
    fixed_tokens = sum(cost(lengths[s : s + 4]) for s in range(0, len(lengths), 4))
    dynamic_tokens = sum(cost([lengths[i] for i in g]) for g in TokenBudget(64, False).groups(lengths))
    assert dynamic_tokens < 0.6 * fixed_tokens, (dynamic_tokens, fixed_tokens)


def _train_rank(rank: int, port: int, out, tiny_base: str = "") -> None:
    import os

    import deepspeed
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from alignment.ppo import rank_ops
    from alignment.ppo.experience import Experience

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank)
    )
    dist.init_process_group("gloo", rank=rank, world_size=2)
    b = batch_of(LENGTHS, seed=0)
    idx = list(range(rank * 8, rank * 8 + 8))  # each rank its contiguous shard, lengths differ
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(len(LENGTHS), b.action_mask.shape[1], generator=g) * b.action_mask
    steps = {}
    for name, changes in (("fixed", {}), ("dynamic", {"use_dynamic_batch": True, "train_max_tokens_per_gpu": 40})):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32, attn_implementation="sdpa")
        old = rank_ops.logprobs(model, b, _cfg(), None)
        exp = Experience(b, old, None, None, adv, adv, torch.zeros(len(LENGTHS)), torch.zeros_like(adv)).rows(idx)
        # one fixed micro-batch of 4 rows per step (DeepSpeed counts G = 1); the token cut needs 2 or 3
        ds = {
            "train_batch_size": 8,
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": 2},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        }
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), config=ds)
        cut = []
        original = rank_ops._backward_step
        rank_ops._backward_step = lambda e, loss, micro, guard: (
            cut.append(micro.boundary),
            original(e, loss, micro, guard),
        )[1]
        try:
            rank_ops.train_actor(engine, exp, _cfg(micro_train_batch_size=4, **changes), kl_coef=0.0, seed=3)
        finally:
            rank_ops._backward_step = original
        steps[name] = ({n: p.detach().clone() for n, p in engine.module.named_parameters()}, engine.global_steps, cut)
    out.put(
        (
            rank,
            {
                "diff": max((steps["fixed"][0][n] - p).abs().max().item() for n, p in steps["dynamic"][0].items()),
                "moved": max(
                    (steps["fixed"][0][n] - p).abs().max().item()
                    for n, p in AutoModelForCausalLM.from_pretrained(tiny_base).named_parameters()
                ),
                "optimizer_steps": (steps["fixed"][1], steps["dynamic"][1]),
                "cuts": steps["dynamic"][2],
            },
        )
    )
    dist.destroy_process_group()


def test_dynamic_training_step_equals_the_fixed_one_on_two_ranks(tiny_base):
    from functools import partial

    got = on_two_ranks(partial(_train_rank, tiny_base=str(tiny_base)))
    for rank in (0, 1):
        r = got[rank]
        assert r["moved"] > 1e-4  # the step did change the weights
        assert r["diff"] < 1e-5, r  # ... the same way with either cut
        assert r["optimizer_steps"] == (2, 2)  # 16 rows, 8 per step: two optimizer steps
        cuts = r["cuts"]  # DeepSpeed told where each step ends
        assert len(cuts) > 2 and cuts.count(True) == 2 and cuts[-1] is True, cuts
    assert len(got[0]["cuts"]) == len(got[1]["cuts"])  # as many micro-batches on both ranks
