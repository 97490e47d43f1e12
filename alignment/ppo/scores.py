"""What a reward source is given (the rendered prompt and the response as generated), and from its rewards to
the scores the advantages see: running normalisation (--normalize_reward
without a trained RM, whose own statistics normalise it), the clip (--reward_clip_range), DAPO's overlong penalty
(--overlong_buffer_len) and ProRL's stop-properly penalty (--stop_properly_penalty_coef), each logged."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample
from alignment.losses.reward_norm import RunningMoments
from alignment.losses.reward_shaping import overlong_penalty, stop_properly
from alignment.rollout.types import Rollout

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def reward_inputs(
    tokenizer: PreTrainedTokenizerBase, rollout: Rollout, prompts: list[PromptSample]
) -> tuple[list, list, list]:
    """(queries, prompts, labels) for a reward source. The query is the prompt text as rendered +
    the response as generated (eos kept), never a re-decode of the prompt ids, so reward
    functions can split the two exactly."""
    src = [prompts[i] for i in rollout.prompt_index]
    responses = tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=False)
    return [p.text + r for p, r in zip(src, responses)], [p.text for p in src], [p.label for p in src]


def shape_scores(
    cfg: PPOConfig,
    rewards: torch.Tensor,
    response_lengths: torch.Tensor,
    finished: list[bool],
    moments: RunningMoments | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """[B] rewards, [B] response lengths, B ended-with-eos flags -> ([B] scores, metrics)."""
    scores, metrics = rewards.float(), {}
    if moments is not None:
        scores = moments.normalize(scores)
    scores = scores.clamp(*cfg.reward.clip_range)
    if cfg.reward.overlong_buffer_len:  # on the reward, not on the scores dynamic filtering read
        penalty = overlong_penalty(
            response_lengths,
            cfg.rollout.max_new_tokens,
            cfg.reward.overlong_buffer_len,
            cfg.reward.overlong_penalty_factor,
        )
        scores = scores + penalty
        metrics["overlong_penalty"] = penalty.mean().item()
    if cfg.reward.stop_properly_penalty_coef is not None:  # responses cut at the limit lose reward
        scores = stop_properly(scores, torch.tensor(finished), cfg.reward.stop_properly_penalty_coef)
        metrics["stop_properly/truncated_fraction"] = 1.0 - sum(finished) / max(len(finished), 1)
    return scores, metrics
