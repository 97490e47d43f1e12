"""The PPO family's loop, one controller per rank: generate → make experience → advantages →
train critic and actor. The math lives in `alignment.losses`; this file only moves tensors.

Models: `actor` and `critic` are DeepSpeed engines (critic None for the critic-free estimators),
`ref` a frozen causal LM, `reward` any callable (queries, prompts, labels) -> [B] tensor.
Generation uses the batched HF engine on the actor's own module, so after each update the
engine already has the new weights (the vLLM engines get them through weight sync).
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from alignment.datasets.prompts import PromptSample
from alignment.distributed.runtime import Runtime
from alignment.losses.advantages import advantages_and_returns
from alignment.losses.kl import KLController, kl_estimate
from alignment.losses.nll import masked_mean
from alignment.losses.ppo import policy_loss, value_loss
from alignment.losses.reward_shaping import token_rewards
from alignment.models.reward_model import ValueCapture
from alignment.ppo.batch import SequenceBatch, action_logprobs, rollout_to_batch
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import SamplingParams
from alignment.trainers.base import mean_across_ranks

log = logging.getLogger(__name__)


@dataclass
class Experience:
    batch: SequenceBatch
    old_logp: torch.Tensor     # [B, L-1]
    ref_logp: torch.Tensor     # [B, L-1]
    values: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor
    scores: torch.Tensor       # [B] clipped sequence rewards
    kl: torch.Tensor           # [B, L-1] per-token KL estimate (0 off the response)

    def rows(self, idx: list[int]) -> "Experience":
        b = self.batch
        pick = (lambda t: None if t is None else t[idx])  # noqa: E731
        return Experience(SequenceBatch(b.sequences[idx], b.attention_mask[idx], b.action_mask[idx],
                                        [b.prompt_index[i] for i in idx]),
                          self.old_logp[idx], self.ref_logp[idx], pick(self.values), self.advantages[idx],
                          self.returns[idx], self.scores[idx], self.kl[idx])


def iterations_per_episode(n_prompts: int, rollout_batch_size: int) -> int:
    return max(1, n_prompts // rollout_batch_size)


class PPOTrainer:
    def __init__(self, cfg: Any, rt: Runtime, actor: Any, critic: Any | None, ref: torch.nn.Module,
                 reward: Callable[[list[str], list[str], list], torch.Tensor], tokenizer: Any,
                 prompts: list[PromptSample]):
        self.cfg, self.rt, self.actor, self.critic, self.ref, self.reward = cfg, rt, actor, critic, ref, reward
        self.tokenizer, self.prompts = tokenizer, prompts
        self.gen = HFEngine(actor.module, tokenizer.eos_token_id, tokenizer.pad_token_id,
                            batch_size=max(cfg.micro_rollout_batch_size, 1), device=rt.torch_device)
        self.kl_ctl = KLController(cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)
        self.values_of = ValueCapture(critic.module) if critic is not None else None
        self.per_rank = cfg.rollout_batch_size // rt.world_size
        self.total_iterations = cfg.num_episodes * iterations_per_episode(len(prompts), cfg.rollout_batch_size)

    # --- one iteration -------------------------------------------------------------------
    def prompt_batch(self, iteration: int) -> list[PromptSample]:
        """This rank's prompts of `iteration`: a seeded shuffle per episode, each prompt used once."""
        per_episode = iterations_per_episode(len(self.prompts), self.cfg.rollout_batch_size)
        episode, k = divmod(iteration, per_episode)
        order = list(range(len(self.prompts)))
        random.Random(self.cfg.seed + episode).shuffle(order)
        start = k * self.cfg.rollout_batch_size + self.rt.rank * self.per_rank
        return [self.prompts[i] for i in order[start:start + self.per_rank]]

    @torch.no_grad()
    def make_experience(self, prompts: list[PromptSample], iteration: int) -> tuple[Experience, dict[str, float]]:
        cfg, dev = self.cfg, self.rt.torch_device
        t0 = time.time()
        rollout = self.gen.generate([p.ids for p in prompts], SamplingParams(
            cfg.generate_max_len, cfg.temperature, cfg.top_p, cfg.n_samples_per_prompt,
            seed=cfg.seed * 100_003 + iteration * self.rt.world_size + self.rt.rank))
        t_gen = time.time() - t0
        batch = rollout_to_batch(rollout, self.tokenizer.pad_token_id).to(dev)
        src = [prompts[i] for i in rollout.prompt_index]
        # query = the prompt text as rendered + the response as generated (eos kept), never a
        # re-decode of the prompt ids, so reward functions can split the two exactly
        responses = self.tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=False)
        queries = [p.text + r for p, r in zip(src, responses)]
        scores = self.reward(queries, [p.text for p in src], [p.label for p in src]).float()
        scores = scores.clamp(*cfg.reward_clip_range).to(dev)
        old_logp, ref_logp, values = [], [], []
        for s in range(0, len(batch.prompt_index), cfg.micro_rollout_batch_size):
            mb = _slice(batch, s, s + cfg.micro_rollout_batch_size)
            old_logp.append(action_logprobs(self.actor.module, mb))
            ref_logp.append(action_logprobs(self.ref, mb.to(next(self.ref.parameters()).device)).to(dev))
            if self.critic is not None:
                values.append(self._values(mb))
        old, ref = torch.cat(old_logp), torch.cat(ref_logp)
        mask = batch.action_mask
        kl = kl_estimate(old, ref, cfg.kl_estimator) * mask
        kl_coef = 0.0 if cfg.use_kl_loss else self.kl_ctl.value
        rewards = token_rewards(scores, kl, mask, kl_coef)
        vals = torch.cat(values) if values else None
        adv, ret = advantages_and_returns(cfg.advantage_estimator, rewards, mask, cfg.n_samples_per_prompt,
                                          cfg.gamma, cfg.lambd, vals)
        exp = Experience(batch, old, ref, vals, adv, ret, scores, kl)
        seq_kl = (kl.sum(-1)).mean().item()
        return exp, {"reward": scores.mean().item(), "kl": seq_kl, "kl_coef": self.kl_ctl.value,
                     "response_length": batch.response_lengths.float().mean().item(),
                     "finished": sum(rollout.finished) / max(len(rollout), 1),
                     "time_generate": t_gen, "time_experience": time.time() - t0 - t_gen}

    def _values(self, mb: SequenceBatch) -> torch.Tensor:
        self.critic.module(input_ids=mb.sequences, attention_mask=mb.attention_mask)
        return self.values_of.take()[:, :-1].float() * mb.action_mask   # state t values action t+1

    def train_on(self, exp: Experience, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        n = len(exp.batch.prompt_index)
        stats: list[dict[str, float]] = []
        rng = random.Random(cfg.seed + iteration)
        train_actor = iteration >= cfg.freezing_actor_steps
        eps_low, eps_high = cfg.eps_clip_low_high or (cfg.eps_clip, cfg.eps_clip)
        for _ in range(cfg.max_epochs):
            order = list(range(n))
            rng.shuffle(order)
            for s in range(0, n, cfg.micro_train_batch_size):
                mb = exp.rows(order[s:s + cfg.micro_train_batch_size])
                mask = mb.batch.action_mask
                row: dict[str, float] = {}
                if self.critic is not None:
                    v = self._values_train(mb.batch)
                    vloss = value_loss(v, mb.values, mb.returns, mask, cfg.value_clip)
                    self.critic.backward(vloss)
                    self.critic.step()
                    row["value_loss"] = vloss.item()
                if train_actor:
                    logp = action_logprobs(self.actor, mb.batch)
                    ploss, clipfrac = policy_loss(logp, mb.old_logp, mb.advantages, mask, eps_low, eps_high,
                                                  cfg.dual_clip)
                    loss = ploss
                    if cfg.use_kl_loss:
                        kl = masked_mean(kl_estimate(logp, mb.ref_logp, cfg.kl_estimator), mask)
                        loss = loss + self.kl_ctl.value * kl
                        row["kl_loss"] = kl.item()
                    self.actor.backward(loss)
                    self.actor.step()
                    row.update(policy_loss=ploss.item(), clipfrac=clipfrac.item())
                stats.append(row)
        keys = stats[0].keys() if stats else []
        return {k: sum(r[k] for r in stats) / len(stats) for k in keys}

    def _values_train(self, b: SequenceBatch) -> torch.Tensor:
        self.critic(input_ids=b.sequences, attention_mask=b.attention_mask)
        return self.values_of.take()[:, :-1].float() * b.action_mask

    def step(self, iteration: int) -> dict[str, float]:
        """One whole iteration; returns its metrics, averaged across ranks."""
        exp, metrics = self.make_experience(self.prompt_batch(iteration), iteration)
        t0 = time.time()
        self.actor.train()
        if self.critic is not None:
            self.critic.train()
        metrics.update(self.train_on(exp, iteration))
        metrics["time_train"] = time.time() - t0
        self.kl_ctl.update(metrics["kl"], len(exp.batch.prompt_index))
        return mean_across_ranks(metrics)


def _slice(b: SequenceBatch, start: int, end: int) -> SequenceBatch:
    return SequenceBatch(b.sequences[start:end], b.attention_mask[start:end], b.action_mask[start:end],
                         b.prompt_index[start:end])
