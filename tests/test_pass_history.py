"""--dynamic_filtering_recheck (alignment/ppo/pass_history.py): prompts whose recent groups taught nothing are
drawn less, so less generation is thrown away; the history is seeded and survives a checkpoint. The controller
here is the real one; only its model groups are a table of outcomes (which prompts are solved), since what is
tested is which prompts get drawn, not what a model answers."""

from __future__ import annotations

import json
import random
from dataclasses import asdict

import pytest
import torch

from alignment.config import ConfigError, parse_args
from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample
from alignment.ppo.controller import PPOController
from alignment.ppo.dynamic_sampling import filtered
from alignment.ppo.loop import PPOState
from alignment.ppo.pass_history import PassHistory
from alignment.ppo.pending import Done
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout

N = 4  # samples a prompt
SOLVED = 45  # prompts 0..44 of 60 are answered right every time; 45..59 right half the time


def test_a_streak_lowers_the_chance_of_a_draw_geometrically():
    h = PassHistory(0.5)
    h.record([(1, False), (1, False), (2, False), (3, True), (2, True)])
    assert h.streaks == {1: 2}  # a mixed group ends a streak
    rng = random.Random(0)
    draws = sum(h.drawn(1, rng) for _ in range(4000))
    assert 0.2 < draws / 4000 < 0.3  # 0.5 ** 2
    assert all(h.drawn(7, rng) for _ in range(10))  # no history: always
    never = PassHistory(0.0, {5: 1, 6: 1})
    assert never.pick([5, 6, 8], 2, random.Random(0)) == [8, 5]  # too few drawn: skipped ones fill in order
    assert PassHistory.restored(0.5, json.loads(json.dumps(h.state()))) == h


class Table:
    """Model groups whose answers are a table: a solved prompt scores 1 on every sample, another 1 and 0."""

    rank, world, has_critic = 0, 1, False

    def __init__(self):
        self.generated: list[int] = []

    def generate(self, prompt_ids, iteration, images=None):
        self.generated += [ids[0] for ids in prompt_ids]
        rows = [ids for ids in prompt_ids for _ in range(N)]
        return Done(Rollout(rows, [[1, 2, 3]] * len(rows), [i for i in range(len(prompt_ids)) for _ in range(N)]))

    def scores(self, queries, prompts, labels):
        s = torch.tensor([1.0 if lab < SOLVED or k % 2 else 0.0 for k, lab in enumerate(labels)])
        return Scored(s, s)


class Decoder:
    def batch_decode(self, ids, skip_special_tokens=False):
        return ["" for _ in ids]


def controller(*flags: str) -> PPOController:
    cfg = parse_args(
        PPOConfig,
        [
            "--pretrain",
            "m",
            "--reward_pretrain",
            "rm",
            "--prompt_data",
            "p",
            "--n_samples_per_prompt",
            str(N),
            "--rollout_batch_size",
            "8",
        ]
        + ["--train_batch_size", "32", "--micro_train_batch_size", "8", "--dynamic_filtering", *flags],
    )
    pool = [PromptSample(f"q{i}", [i], i) for i in range(60)]
    return PPOController(cfg, Table(), Decoder(), pool)


def run(ppo: PPOController, iterations: range) -> list[dict]:
    out = []
    for it in iterations:
        gen, metrics = ppo.generation(it), {}
        prompts, rollout, scored = filtered(ppo, it, gen.prompts, gen.sampled.get(), metrics, 8)
        mixed = sum(p.label >= SOLVED for p in prompts)  # mixed groups first, then any top-up
        assert len(prompts) == 8 and mixed == 8 - metrics["dynamic_filtering/topped_up"]
        out.append(metrics)
    return out


def test_the_history_cuts_what_is_generated_only_to_be_dropped():
    plain, skipping = run(controller(), range(12)), run(controller("--dynamic_filtering_recheck", "0.25"), range(12))
    generated = [sum(m["dynamic_filtering/prompts_generated"] for m in r[4:]) for r in (plain, skipping)]
    share = [sum(m["dynamic_filtering/gradient_token_share"] for m in r[4:]) / 8 for r in (plain, skipping)]
    assert generated[1] < 0.6 * generated[0], generated  # once prompts have a history, far fewer are drawn
    assert share[1] > share[0] + 0.2 and all(0 < s <= 1 for s in share), share
    # the share is what it says: kept groups' tokens over all generated ones (3 tokens a response here)
    m = skipping[-1]
    used = 8 - m["dynamic_filtering/topped_up"]
    assert m["dynamic_filtering/gradient_token_share"] == pytest.approx(used / m["dynamic_filtering/prompts_generated"])


def test_a_resumed_run_draws_what_the_uninterrupted_one_drew():
    whole = controller("--dynamic_filtering_recheck", "0.25")
    run(whole, range(10))
    first = controller("--dynamic_filtering_recheck", "0.25")
    run(first, range(6))
    saved = json.loads(json.dumps(asdict(first.snapshot(6, []))))  # state.json
    resumed = controller("--dynamic_filtering_recheck", "0.25")
    resumed.restore(PPOState(**saved))
    run(resumed, range(6, 10))
    assert resumed.groups.generated == whole.groups.generated[len(first.groups.generated) :]
    assert resumed.history == whole.history


@pytest.mark.parametrize("flags", [["--dynamic_filtering_recheck", "1.5"], ["--dynamic_filtering_recheck", "nan"]])
def test_recheck_is_a_probability_with_dynamic_filtering(flags):
    with pytest.raises(ConfigError, match="--dynamic_filtering_recheck"):
        controller(*flags)
    with pytest.raises(ConfigError, match="with --dynamic_filtering"):
        parse_args(
            PPOConfig,
            ["--pretrain", "m", "--reward_pretrain", "rm", "--prompt_data", "p", "--dynamic_filtering_recheck", "0.5"],
        )


def lags_of_trained_rows(ppo: PPOController, iterations: range, updates_between: int) -> tuple[list[dict], list[int]]:
    """Iterations as the async loop runs them, `updates_between` weight syncs after each; the metrics and every
    trained row's lag (updates between the policy that sampled it and the one that trains it)."""
    out, lags = [], []
    for it in iterations:
        gen, metrics = ppo.generation(it), {}
        prompts, rollout, _ = filtered(ppo, it, gen.prompts, gen.sampled.get(), metrics, 8)
        assert (
            len(prompts) == 8 and sum(p.label >= SOLVED for p in prompts) == 8 - metrics["dynamic_filtering/topped_up"]
        )
        lags += [ppo.synced - v for v in rollout.versions]
        out.append(metrics)
        ppo.synced += updates_between
    return out, lags


ASYNC = ("--async_train", "--vllm_num_engines", "1", "--async_queue_size", "1", "--vllm_generate_batch_size", "16")


def test_async_keeps_surplus_mixed_groups_for_the_next_iteration_within_the_bound():
    carried, lags = lags_of_trained_rows(controller(*ASYNC), range(12), 1)
    dropping = controller(*ASYNC)
    dropping.carry = None  # the surplus thrown away, as a synchronous run must
    dropped, _ = lags_of_trained_rows(dropping, range(12), 1)

    def share(rows: list[dict]) -> float:  # 3 tokens a response: tokens used / generated over the run
        used = sum(m["dynamic_filtering/gradient_token_share"] * m["dynamic_filtering/prompts_generated"] for m in rows)
        return used / sum(m["dynamic_filtering/prompts_generated"] for m in rows)

    def rounds(rows: list[dict]) -> float:
        return sum(m["dynamic_filtering/refill_rounds"] for m in rows) / len(rows)

    assert sum(m["dynamic_filtering/carried"] for m in carried) > 0
    # refill rounds sized by the keep rate, their surplus carried: a quarter of the sequential rounds (1.4 against
    # 6.5 an iteration here), and no more of the generation thrown away (the table's keep rate bounds the share)
    assert rounds(carried) < 0.5 * rounds(dropped), (rounds(carried), rounds(dropped))
    assert share(carried) > share(dropped) - 0.02, (share(carried), share(dropped))
    assert max(lags) == 1 and min(lags) == 0  # carried groups one update old, the rest fresh: never past the bound
    # two updates between iterations: last iteration's surplus is past --async_queue_size 1, so none is used
    stale, lags = lags_of_trained_rows(controller(*ASYNC), range(6), 2)
    assert sum(m["dynamic_filtering/carried"] for m in stale) == 0 and max(lags) == 0
    assert controller().carry is None  # a synchronous run stays on-policy
