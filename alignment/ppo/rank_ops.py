"""What one rank does with its models in an iteration: log-probs, values, a critic update, an
actor update. Shared by PPO without Ray (every model in one process) and the Ray model workers,
so there is one copy of the algorithm.
"""
from __future__ import annotations

import random
from functools import partial
from typing import Any, Iterator

import torch

from alignment.config.ppo import PPOConfig
from alignment.losses.aggregation import StepTotals, aggregate
from alignment.losses.kl import kl_estimate
from alignment.losses.nll import masked_mean
from alignment.losses.ppo import policy_loss, value_loss
from alignment.ppo.batch import SequenceBatch, action_logprobs
from alignment.ppo.experience import Experience
from alignment.ppo.packed import Packing, pack, unpack


def micro_slices(batch: SequenceBatch, size: int) -> Iterator[SequenceBatch]:
    for s in range(0, len(batch.prompt_index), size):
        yield batch.rows(s, s + size)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def logprobs(model: torch.nn.Module, batch: SequenceBatch, micro: int, packing: Packing | None = None) -> torch.Tensor:
    """[B, L-1] action log-probs, computed `micro` rows at a time on the model's device; CPU out."""
    dev = model_device(model)
    return torch.cat([action_logprobs(model, mb.to(dev), packing).cpu() for mb in micro_slices(batch, micro)])


def value_forward(critic: Any, capture: Any, batch: SequenceBatch, packing: Packing | None = None) -> torch.Tensor:
    """[B, L-1]: V of the state before each action (the value read at token t scores action t+1)."""
    if packing is None:
        critic(input_ids=batch.sequences, attention_mask=batch.attention_mask)
        v = capture.take()
    else:
        rows = pack(batch.sequences, batch.attention_mask, packing)
        critic(**rows.forward_kwargs())
        v = unpack(capture.take(), rows, tuple(batch.sequences.shape))
    return v[:, :-1].float() * batch.action_mask


@torch.no_grad()
def values(critic: torch.nn.Module, capture: Any, batch: SequenceBatch, micro: int,
           packing: Packing | None = None) -> torch.Tensor:
    dev = model_device(critic)
    return torch.cat([value_forward(critic, capture, mb.to(dev), packing).cpu() for mb in micro_slices(batch, micro)])


def _epochs(exp: Experience, cfg: PPOConfig, seed: int) -> Iterator[Experience]:
    """Micro-batches of a shuffled experience, --max_epochs times."""
    rng = random.Random(seed)
    for _ in range(cfg.max_epochs):
        order = list(range(len(exp)))
        rng.shuffle(order)
        for s in range(0, len(exp), cfg.micro_train_batch_size):
            yield exp.rows(order[s:s + cfg.micro_train_batch_size])


def _steps(engine: Any, exp: Experience, cfg: PPOConfig, seed: int) -> Iterator[tuple[Experience, StepTotals]]:
    """The micro-batches of `_epochs`, each with the totals of the optimizer step it belongs to:
    its G micro-batches on each of the D ranks (one all-reduce of two numbers per step)."""
    import torch.distributed as dist

    accum = engine.gradient_accumulation_steps()
    ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    micro = list(_epochs(exp, cfg, seed))
    for s in range(0, len(micro), accum):
        step = micro[s:s + accum]
        counts = torch.tensor([sum(float(mb.batch.action_mask.sum()) for mb in step), float(sum(len(mb) for mb in step))],
                              dtype=torch.float64, device=model_device(engine.module))   # NCCL reduces GPU tensors
        if ranks > 1:
            dist.all_reduce(counts)
        totals = StepTotals(counts[0].item(), counts[1].item(), float(accum * ranks))
        yield from ((mb, totals) for mb in step)


def _agg(cfg: PPOConfig, totals: StepTotals):
    return partial(aggregate, mode=cfg.loss_agg(), totals=totals, norm_len=cfg.generate_max_len)


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} if rows else {}


def train_critic(critic: Any, capture: Any, exp: Experience, cfg: PPOConfig, seed: int,
                 packing: Packing | None = None) -> dict[str, float]:
    """Clipped value loss on each micro-batch, aggregated over its optimizer step (--loss_agg_mode);
    DeepSpeed steps at accumulation boundaries."""
    critic.train()
    dev, rows = model_device(critic.module), []
    for mb, totals in _steps(critic, exp, cfg, seed):
        b = mb.batch.to(dev)
        v = value_forward(critic, capture, b, packing)
        loss = value_loss(v, mb.values.to(dev), mb.returns.to(dev), b.action_mask, cfg.value_clip, _agg(cfg, totals))
        critic.backward(loss)
        critic.step()
        rows.append({"value_loss": loss.item()})
    return _mean(rows)


def train_actor(actor: Any, exp: Experience, cfg: PPOConfig, kl_coef: float, seed: int,
                packing: Packing | None = None) -> dict[str, float]:
    """Clipped (optionally dual-clipped) policy loss, plus β·KL when --use_kl_loss, each aggregated
    over the optimizer step (--loss_agg_mode)."""
    actor.train()
    eps_low, eps_high = cfg.eps_clip_low_high or (cfg.eps_clip, cfg.eps_clip)
    dev, rows = model_device(actor.module), []
    for mb, totals in _steps(actor, exp, cfg, seed):
        b, agg = mb.batch.to(dev), _agg(cfg, totals)
        mask = b.action_mask
        logp = action_logprobs(actor, b, packing)
        old = logp.detach() if mb.old_logp is None else mb.old_logp.to(dev)   # None: on-policy (needs_old_logprobs)
        ploss, clipfrac = policy_loss(logp, old, mb.advantages.to(dev), mask, eps_low, eps_high, cfg.dual_clip, agg)
        loss, row = ploss, {"policy_loss": ploss.item(), "clipfrac": clipfrac.item(),
                            # how far this update has moved π from the policy that sampled (k3 estimate)
                            "approx_kl": masked_mean(kl_estimate(logp.detach(), old, "k3"), mask).item()}
        if cfg.use_kl_loss:
            kl = agg(kl_estimate(logp, mb.ref_logp.to(dev), cfg.kl_estimator), mask)
            loss = loss + kl_coef * kl
            row["kl_loss"] = kl.item()
        actor.backward(loss)
        actor.step()
        rows.append(row)
    return _mean(rows)
