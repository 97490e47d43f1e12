"""Experience: one iteration's samples with everything PPO trains on, and how it is assembled
from the models' outputs (rewards per token, then advantages). Pure tensors; no models here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from alignment.config.ppo import PPOConfig
from alignment.losses.advantages import Sum, advantages_and_returns
from alignment.losses.kl import kl_estimate
from alignment.losses.reward_shaping import token_rewards
from alignment.ppo.batch import SequenceBatch

if TYPE_CHECKING:
    from alignment.config.ppo import PPOAlgo


@dataclass
class Experience:
    batch: SequenceBatch
    old_logp: (
        torch.Tensor | None
    )  # [B, L-1] the policy's log-probs when the samples were made (None: on-policy, see below)
    ref_logp: torch.Tensor | None  # [B, L-1]; None when no KL term uses it
    values: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor
    scores: torch.Tensor  # [B] clipped sequence rewards
    kl: torch.Tensor  # [B, L-1] per-token KL estimate (0 off the response)
    is_weight: torch.Tensor | None = None  # [B, L-1] --enable_vllm_is_correction: truncated engine/trainer weights

    def __len__(self) -> int:
        return len(self.batch.prompt_index)

    def rows(self, idx: list[int]) -> "Experience":
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return Experience(
            self.batch.pick(idx),
            pick(self.old_logp),
            pick(self.ref_logp),
            pick(self.values),
            self.advantages[idx],
            self.returns[idx],
            self.scores[idx],
            self.kl[idx],
            pick(self.is_weight),
        )

    def trimmed(self) -> "Experience":
        """Without the padding columns all its rows share (SequenceBatch.trimmed)."""
        batch = self.batch.trimmed()
        cut = lambda t: None if t is None else t[:, : batch.width - 1]  # noqa: E731
        return Experience(
            batch,
            cut(self.old_logp),
            cut(self.ref_logp),
            cut(self.values),
            cut(self.advantages),
            cut(self.returns),
            self.scores,
            cut(self.kl),
            cut(self.is_weight),
        )

    def shards(self, n: int) -> list["Experience"]:
        """n contiguous, equal parts (one per rank of a training group)."""
        size = len(self) // n
        return [self.rows(list(range(k * size, (k + 1) * size))) for k in range(n)]


def uses_reference(algo: PPOAlgo) -> bool:
    """The reference policy only enters through the KL: with a fixed coefficient of 0 and no KL loss
    it changes nothing (OpenRLHF, too, drops the reference at --init_kl_coef 0)."""
    return algo.kl.init_coef > 0 or algo.kl.use_loss or algo.kl.target is not None


def needs_old_logprobs(cfg: PPOConfig) -> bool:
    """Old log-probs serve the KL and the PPO ratio after the first update of a rollout. With one
    optimizer step per rollout and no KL they equal the detached log-probs of the training forward
    (ratio 1), so their forward pass is skipped — as TRL's GRPO does."""
    return uses_reference(cfg.algo) or cfg.train.max_epochs > 1 or cfg.rollout.samples > cfg.train.batch_size


def assemble(
    cfg: PPOConfig,
    batch: SequenceBatch,
    scores: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    values: torch.Tensor | None,
    kl_coef: float,
    across: Sum | None = None,
) -> Experience:
    """Rewards per token (score on the last token, −β·KL on each unless --use_kl_loss), then the
    estimator's advantages and returns. Rows must be grouped n_samples_per_prompt per prompt.
    ref_logp None (no KL term, `uses_reference`): the KL is 0. `across`: this is one rank's part of
    the iteration's batch (whitening statistics are the whole batch's)."""
    mask = batch.action_mask
    if ref_logp is None:
        kl = torch.zeros(mask.shape, dtype=torch.float32)
    else:
        kl = kl_estimate(old_logp, ref_logp, cfg.algo.kl.estimator) * mask
    rewards = token_rewards(scores, kl, mask, 0.0 if cfg.algo.kl.use_loss else kl_coef)
    adv, ret = advantages_and_returns(
        cfg.algo.advantage.estimator,
        rewards,
        mask,
        cfg.rollout.n_samples_per_prompt,
        cfg.algo.advantage.gamma,
        cfg.algo.advantage.lambd,
        values,
        across,
        not cfg.algo.advantage.no_std_norm,
    )
    return Experience(batch, old_logp, ref_logp, values, adv, ret, scores, kl)


def experience_metrics(exp: Experience, finished: list[bool]) -> dict[str, float]:
    out = {
        "reward": exp.scores.mean().item(),
        "response_length": exp.batch.response_lengths.float().mean().item(),
        "finished": sum(finished) / max(len(finished), 1),
    }
    if exp.ref_logp is not None:  # no reference loaded (no KL term): the KL was not measured, so no row claims 0
        out["kl"] = exp.kl.sum(-1).mean().item()
    if exp.is_weight is not None:
        mask = exp.batch.action_mask.bool()
        out["is_weight"] = exp.is_weight[mask].mean().item()
    return out
