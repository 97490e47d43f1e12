"""DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476, §3.2; OpenRLHF's --dynamic_filtering).

A group of n samples of one prompt whose scores are all right or all wrong has zero advantage under a group
estimator (group_norm, rloo, reinforce_baseline, dr_grpo): it costs a training pass and teaches nothing. Under
REINFORCE++'s batch whitening or GAE such a prompt does get an advantage, but one about a question the policy
already always (or never) answers right: little to learn. So, for every estimator as in OpenRLHF, the groups
whose mean score is outside (low, high) are dropped and more prompts are sampled until the
iteration has --rollout_batch_size prompts' worth of groups again.

Refill prompts are drawn by a seeded choice of (--seed, iteration, round, rank), and their samples use
seeds of their own, so a resumed iteration draws the same ones. After MAX_ROUNDS refills an iteration that
is still short is topped up with dropped groups, so every iteration keeps the batch shape the step sizes were
checked for: their advantage is zero under group_norm, rloo and dr_grpo (no policy gradient; a KL loss still
applies), while the whitening of reinforce_baseline and reinforce shifts it by the batch mean.

With --dynamic_filtering_recheck the draws skip the prompts whose recent groups taught nothing
(alignment.ppo.pass_history), so fewer groups are generated only to be dropped.

Under --async_train, where a batch may hold samples up to --async_queue_size updates old, mixed groups are not
thrown away for being more than an iteration needs, as AReaL and ROLL keep a buffer: a refill round draws the
shortfall divided by the share of groups kept so far (fewer, larger rounds), the oversampled batch
(--vllm_generate_batch_size) and those rounds leave surplus mixed groups, and the next iteration trains on them
first while they are within the bound (`Carry`). A synchronous run stays on-policy: it generates only the shortfall.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from dataclasses import dataclass
from typing import Protocol

import torch

from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample
from alignment.distributed.collectives import gather_everywhere
from alignment.ppo.pass_history import PassHistory, token_share
from alignment.ppo.pending import Pending
from alignment.ppo.sampled import Sampled
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout

log = logging.getLogger(__name__)

MAX_ROUNDS = 8
_topped_up_said = threading.Event()  # the top-up warning, once a process
_EPS = 1e-6


def kept_groups(scores: torch.Tensor, n: int, low: float, high: float) -> list[int]:
    """[P·n] scores, n per group in order -> the positions of the groups whose mean is strictly inside (low, high)."""
    means = scores.float().view(-1, n).mean(-1)
    return [g for g, m in enumerate(means.tolist()) if low + _EPS < m < high - _EPS]


@dataclass
class Groups:
    """Whole groups gathered across rounds: prompts, their samples and their scores, in order."""

    prompts: list[PromptSample]
    rollout: Rollout
    scored: list[Scored]

    @staticmethod
    def empty() -> "Groups":
        return Groups([], Rollout(), [])

    def add(self, prompts: list[PromptSample], rollout: Rollout, scored: Scored, groups: list[int], n: int) -> None:
        for g in groups:
            rows = list(range(g * n, (g + 1) * n))
            part = rollout.rows(rows)
            part.prompt_index = [0] * n
            self.rollout.extend(part, index_offset=len(self.prompts))
            self.prompts.append(prompts[g])
            self.scored.append(Scored(scored.rewards[rows], scored.scores[rows], scored.logs))

    def merged(self) -> Scored:
        return Scored.concat(self.scored)


@dataclass
class Carry:
    """Mixed groups generated beyond an iteration's need (--async_train), for the next iteration; their rows'
    `Rollout.versions` say which policy sampled them."""

    groups: Groups
    bound: int  # --async_queue_size: the most updates a trained sample may be behind

    def take(self, kept: Groups, need: int, synced: int, n: int) -> tuple[int, int, int]:
        """Up to `need` carried groups into `kept`, those at most `bound` updates old; the other fresh ones stay
        for later, the older ones are let go. (groups taken, their response tokens, the let-go groups' tokens:
        a carried group's tokens count as generated where it is taken or let go.)"""
        old = self.groups
        if not old.prompts:
            return 0, 0, 0

        def tokens(groups: list[int]) -> int:
            return sum(len(old.rollout.response_ids[r]) for k in groups for r in range(k * n, (k + 1) * n))

        fresh = [k for k in range(len(old.prompts)) if synced - old.rollout.versions[k * n] <= self.bound]
        stale = [k for k in range(len(old.prompts)) if k not in fresh]
        scored, self.groups = old.merged(), Groups.empty()
        kept.add(old.prompts, old.rollout, scored, fresh[:need], n)
        self.groups.add(old.prompts, old.rollout, scored, fresh[need:], n)
        return len(fresh[:need]), tokens(fresh[:need]), tokens(stale)


def refill_size(short: int, kept: int, generated: int, carry: Carry | None) -> int:
    """Prompts a refill round draws for a shortfall of `short` groups: the shortfall itself, or, when a carry
    takes the surplus, the shortfall over the share of groups kept so far (at most 8 times it)."""
    if carry is None:
        return short
    return math.ceil(short / max(kept / max(generated, 1), 1 / 8))


def refill_prompts(
    pool: list[PromptSample],
    k: int,
    seed: int,
    iteration: int,
    round_: int,
    rank: int,
    history: PassHistory | None = None,
) -> list[PromptSample]:
    """k prompts for refill round `round_` of `iteration` (on controller `rank`): a seeded choice; with
    --dynamic_filtering_recheck, one that passes over the prompts the history expects to teach nothing."""
    rng = random.Random(f"{seed}-{iteration}-{round_}-{rank}")
    if history is None:
        return [pool[i] for i in rng.sample(range(len(pool)), min(k, len(pool)))]
    return [pool[i] for i in history.pick(rng.sample(range(len(pool)), len(pool)), k, rng)]


def refill_key(iteration: int, round_: int, total_iterations: int) -> int:
    """The 'iteration' a refill round's samples are seeded by (sampling_params): past every real one."""
    return total_iterations * round_ + iteration


class Ranked(Protocol):
    rank: int  # this controller's place among the launcher's


class Resampling(Protocol):
    """What the refill loop asks of the PPO controller (alignment.ppo.controller.PPOController)."""

    cfg: PPOConfig
    groups: Ranked  # its .rank: this controller's share of the refills
    prompts: list[PromptSample]
    total_iterations: int
    history: PassHistory | None  # --dynamic_filtering_recheck
    carry: Carry | None  # --async_train: surplus mixed groups for the next iteration
    synced: int  # the policy version about to train

    def position(self, prompt: PromptSample) -> int: ...

    def score(self, prompts: list[PromptSample], sampled: Sampled) -> Scored: ...
    def sample(self, prompts: list[PromptSample], key: int) -> Pending[Sampled]: ...


def top_up(kept: Groups, dropped: Groups, need: int, n: int, iteration: int, round_: int) -> int:
    """After the last refill `round_`: `kept` filled to `need` groups with the first dropped ones; how many."""
    short = need - len(kept.prompts)
    if short:  # zero-advantage groups keep the batch shape and change no gradient
        # said once a run (a policy that gets most prompts right tops up nearly every iteration); every
        # iteration's count is in the metrics, train/dynamic_filtering/topped_up, and on the progress line
        (log.debug if _topped_up_said.is_set() else log.warning)(
            "--dynamic_filtering: iteration %d found %d of %d groups with mixed scores after %d refill "
            "rounds; topped up with %d dropped groups (said once; later iterations' counts: "
            "train/dynamic_filtering/topped_up)",
            iteration + 1,
            len(kept.prompts),
            need,
            round_,
            short,
        )
        _topped_up_said.set()
        kept.add(dropped.prompts, dropped.rollout, dropped.merged(), list(range(short)), n)
    return short


def filtered(
    ppo: Resampling,
    iteration: int,
    prompts: list[PromptSample],
    sampled: Sampled,
    metrics: dict[str, float],
    need: int | None = None,
) -> tuple[list[PromptSample], Rollout, Scored]:
    """--dynamic_filtering: this iteration's prompts and samples with the
    groups whose mean score is outside --dynamic_filtering_reward_range replaced by refills; `metrics` gets
    the dropped fraction, the refill rounds, the prompts generated and the share of generated tokens that reach
    a gradient. `need`: the groups an iteration trains on (fewer than `prompts` when
    --vllm_generate_batch_size oversampled them). With --dynamic_filtering_recheck every group's outcome goes
    into the prompts' history, from every rank."""
    cfg, g, n = ppo.cfg, ppo.groups, ppo.cfg.rollout.n_samples_per_prompt
    low, high = cfg.algo.dynamic_filtering_range
    need, kept, dropped, carry = need or len(prompts), Groups.empty(), Groups.empty(), ppo.carry
    generated, round_, tokens, outcomes, carried, carried_out = 0, 0, [0, 0], [], 0, 0
    if carry is not None:  # last iteration's surplus first: already paid for, counted here where it is used
        carried, carried_tokens, let_go = carry.take(kept, need, ppo.synced, n)
        tokens = [carried_tokens, carried_tokens + let_go]
    while True:
        rollout, scored = sampled.rollout, ppo.score(prompts, sampled)
        if round_ == 0:  # what the policy earns on its own draw, comparable with an unfiltered run's reward
            metrics["dynamic_filtering/sampled_reward"] = scored.rewards.float().mean().item()
        keep = kept_groups(scored.scores, n, low, high)
        generated += len(prompts)
        used = keep[: need - len(kept.prompts)]
        extra = keep[len(used) :] if carry is not None else []  # carried: its tokens count where it is used
        lengths = [len(r) for r in rollout.response_ids]
        tokens[0] += sum(sum(lengths[k * n : (k + 1) * n]) for k in used)
        tokens[1] += sum(lengths) - sum(sum(lengths[k * n : (k + 1) * n]) for k in extra)
        if ppo.history is not None:
            outcomes += [(ppo.position(p), k in keep) for k, p in enumerate(prompts)]
        kept.add(prompts, rollout, scored, used, n)
        if carry is not None:  # for the next iteration, after any carried group left over
            carry.groups.add(prompts, rollout, scored, extra, n)
            carried_out += len(extra)
        dropped.add(prompts, rollout, scored, [k for k in range(len(prompts)) if k not in keep], n)
        if len(kept.prompts) >= need or round_ == MAX_ROUNDS:
            break
        round_ += 1
        k = refill_size(need - len(kept.prompts), len(kept.prompts) - carried, generated, carry)
        prompts = refill_prompts(ppo.prompts, k, cfg.train.seed, iteration, round_, g.rank, ppo.history)
        sampled = ppo.sample(prompts, refill_key(iteration, round_, ppo.sizes.iterations)).get()
    short = top_up(kept, dropped, need, n, iteration, round_)
    if ppo.history is not None:  # every rank's outcomes, so each controller keeps (and saves) the same history
        ppo.history.record(gather_everywhere(outcomes))
    metrics.update(
        {
            "dynamic_filtering/gradient_token_share": token_share(*tokens),
            "dynamic_filtering/dropped_fraction": 1.0 - (need - short - carried + carried_out) / generated,
            "dynamic_filtering/refill_rounds": float(round_),
            "dynamic_filtering/prompts_generated": float(generated),
            "dynamic_filtering/topped_up": float(short),
            **({"dynamic_filtering/carried": float(carried)} if carry is not None else {}),
        }
    )
    return kept.prompts, kept.rollout, kept.merged()
