"""Evaluation inside PPO (OpenRLHF's --eval.dataset / --eval.steps / --eval.temperature /
--eval.n_samples_per_prompt): every --eval_steps iterations the policy answers the held-out prompts,
--eval_n_samples_per_prompt times each at --eval_temperature, on the same engines and reward as training.

As OpenRLHF's compute_eval_metrics: pass1 is the mean reward, pass<n> the mean over prompts of each prompt's
best reward (with a 0/1 reward: the fraction of prompts answered right at least once in n tries). Logged
as eval/pass1, eval/pass<n>, eval/response_length and eval/truncated (cut at the length limit).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignment.config.ppo import PPOConfig
from alignment.rollout.types import Rollout, SamplingParams

EVAL_SEED = 7_919  # eval draws are seeded apart from the training iterations' (alignment/ppo/schedule.py)


def eval_due(eval_steps: int, iteration: int, total: int) -> bool:
    """After `iteration` (1-based) of `total`: every --eval_steps, or once at the end when it is -1 (a given
    --eval_dataset is always used; OpenRLHF's -1 evaluates never, which would leave the flag without effect)."""
    return iteration % eval_steps == 0 if eval_steps > 0 else iteration == total


def eval_params(cfg: PPOConfig, iteration: int) -> SamplingParams:
    greedy = cfg.eval.temperature == 0  # OpenRLHF passes 0 to vLLM, which then decodes greedily
    return SamplingParams(
        cfg.rollout.max_new_tokens,
        cfg.eval.temperature if not greedy else 1.0,
        cfg.rollout.top_p,
        cfg.eval.n_samples_per_prompt,
        seed=cfg.train.seed * 100_003 + EVAL_SEED + iteration,
        greedy=greedy,
        max_total_len=cfg.data.max_len,
    )


def eval_metrics(rewards: torch.Tensor, n: int, rollout: Rollout) -> dict[str, float]:
    """rewards [P * n] (n consecutive per prompt) -> pass1, pass<n>, mean response length, truncated fraction."""
    per_prompt = rewards.float().reshape(-1, n)
    out = {"pass1": per_prompt.mean().item()}
    if n > 1:
        out[f"pass{n}"] = per_prompt.max(-1).values.mean().item()
    out["response_length"] = sum(len(r) for r in rollout.response_ids) / max(len(rollout), 1)
    out["truncated"] = 1.0 - sum(rollout.finished) / max(len(rollout), 1)
    return out


@dataclass
class BestSoFar:
    """--best_metric_key: the metric followed (None: off) and its best value so far (kept in PPOState)."""

    metric: str | None
    value: float | None = None

    def improved(self, metrics: dict[str, float]) -> bool:
        if self.metric is None or self.metric not in metrics:
            return False
        if self.value is not None and metrics[self.metric] <= self.value:
            return False
        self.value = metrics[self.metric]
        return True
