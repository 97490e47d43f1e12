"""What one rank does with its models in an iteration: log-probs, values, a critic update, an
actor update. Shared by PPO without Ray (every model in one process) and the Ray model workers,
so there is one copy of the algorithm.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Iterator

import torch
import torch.distributed as dist

from alignment.config.ppo import PPOConfig
from alignment.config.runs import Train
from alignment.distributed.collectives import max_across_ranks, world_size
from alignment.losses.aggregation import StepTotals, aggregate
from alignment.losses.kl import kl_estimate
from alignment.losses.nll import masked_mean
from alignment.losses.ppo import POLICY_LOSSES, value_loss
from alignment.nonfinite import NonFiniteGuard, zero_loss
from alignment.ppo.batch import SequenceBatch, action_logprobs, actor_forward
from alignment.ppo.ema import EMA
from alignment.ppo.experience import Experience
from alignment.ppo.packed import Packing, pack, unpack
from alignment.ppo.token_budget import TokenBudget, split_to
from alignment.training.engine import step as engine_step

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

    from alignment.models.reward_model import ValueCapture


def micro_groups(batch: SequenceBatch, rows: int, max_tokens: int | None, packing: Packing | None) -> list[list[int]]:
    """Row indices of each micro-batch: `rows` at a time in order, or (--use_dynamic_batch, max_tokens
    set) by token budget, as many on every rank of the group (token_budget.split_to)."""
    if max_tokens is None:
        return [list(range(s, min(s + rows, len(batch.prompt_index)))) for s in range(0, len(batch.prompt_index), rows)]
    groups = TokenBudget(max_tokens, packing is not None).groups(batch.attention_mask.sum(-1).tolist())
    return split_to(groups, max_across_ranks(len(groups)))


def _rollout_cut(cfg: PPOConfig) -> tuple[int, int | None]:
    """(rows, token budget) of the log-prob and value passes."""
    budget = (
        (cfg.rollout.max_tokens_per_gpu or cfg.train.max_tokens_per_gpu) if cfg.train.dynamic_batch_enable else None
    )
    return cfg.rollout.micro_batch_size, budget


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _per_micro_batch(forward, batch: SequenceBatch, cfg: PPOConfig, packing: Packing | None) -> torch.Tensor:
    """[B, L-1] on CPU: forward(micro-batch) on each micro-batch cut from batch, trimmed to its own
    longest row, and its [b, w-1] output put back in the batch's rows and columns."""
    out = torch.zeros(batch.action_mask.shape)
    for idx in micro_groups(batch, *_rollout_cut(cfg), packing):
        got = forward(batch.pick(idx).trimmed()).cpu()
        out[idx, : got.shape[1]] = got.to(out.dtype)
    return out


@torch.no_grad()
def logprobs(
    model: torch.nn.Module, batch: SequenceBatch, cfg: PPOConfig, packing: Packing | None = None
) -> torch.Tensor:
    """[B, L-1] action log-probs on the model's device, a micro-batch at a time (_rollout_cut); CPU out."""
    dev = model_device(model)
    return _per_micro_batch(lambda mb: action_logprobs(model, mb.to(dev), packing), batch, cfg, packing)


def value_forward(
    critic: torch.nn.Module, capture: ValueCapture, batch: SequenceBatch, packing: Packing | None = None
) -> torch.Tensor:
    """[B, L-1]: V of the state before each action (the value read at token t scores action t+1)."""
    if packing is None:
        critic(input_ids=batch.sequences, attention_mask=batch.attention_mask)
        v = capture.take()
    else:
        rows = pack(batch.sequences, batch.attention_mask, packing, prompt_lengths=batch.prompt_lengths)
        critic(**rows.forward_kwargs())
        v = unpack(capture.take(), rows, tuple(batch.sequences.shape))
    return v[:, :-1].float() * batch.action_mask


@torch.no_grad()
def values(
    critic: torch.nn.Module, capture: ValueCapture, batch: SequenceBatch, cfg: PPOConfig, packing: Packing | None = None
) -> torch.Tensor:
    dev = model_device(critic)
    return _per_micro_batch(lambda mb: value_forward(critic, capture, mb.to(dev), packing), batch, cfg, packing)


@dataclass(frozen=True)
class Micro:
    exp: Experience  # the micro-batch, trimmed to its longest row
    totals: StepTotals  # of the optimizer step it belongs to
    boundary: bool | None  # --use_dynamic_batch: whether it ends the step (told to DeepSpeed); None: DeepSpeed counts


def _steps(
    engine: DeepSpeedEngine, exp: Experience, train: Train, seed: int, packing: Packing | None = None
) -> Iterator[Micro]:
    """The micro-batches of --max_epochs shuffled passes over the experience, each with the totals of
    the optimizer step it belongs to: the step's rows on each of the D ranks (one all-reduce of two
    numbers per step). A step is G x --micro_train_batch_size rows per rank (G: DeepSpeed's
    accumulation steps), cut into G micro-batches of that many rows, or (--use_dynamic_batch) into as
    many as --train_max_tokens_per_gpu needs, the same count on every rank, with DeepSpeed told where
    the step ends. The loss scale stays G·D either way (losses/aggregation.py), so the step's
    gradient does not depend on the cut."""

    # D: data-parallel replicas; a tensor-parallel replica's ranks hold the same rows (--ds_tensor_parallel_size)
    tp = max(1, engine.autotp_size())
    accum, ranks = engine.gradient_accumulation_steps(), world_size() // tp
    step_rows = accum * train.micro_batch_size
    budget = train.max_tokens_per_gpu if train.dynamic_batch_enable else None
    rng = random.Random(seed)
    for _ in range(train.max_epochs):
        order = _shuffled(exp.batch.prompt_index, rng, packing is not None and packing.mask_dtype is not None)
        for s in range(0, len(exp), step_rows):
            step = exp.rows(order[s : s + step_rows])
            groups = micro_groups(step.batch, train.micro_batch_size, budget, packing)
            counts = torch.tensor(
                [float(step.batch.action_mask.sum()), float(len(step))],
                dtype=torch.float64,
                device=model_device(engine.module),
            )  # NCCL reduces GPU tensors
            if world_size() > 1:
                dist.all_reduce(counts)
                counts /= tp
            totals = StepTotals(counts[0].item(), counts[1].item(), float(accum * ranks))
            for k, idx in enumerate(groups):
                yield Micro(step.rows(idx).trimmed(), totals, None if budget is None else k == len(groups) - 1)


def _shuffled(prompt_index: list[int], rng: random.Random, by_prompt: bool) -> list[int]:
    """A pass's row order. by_prompt (packed rows share prompts): the prompts are shuffled and each
    one's samples kept together, so they land in one micro-batch and its prompt is computed once
    (how a step is cut into micro-batches does not change its gradient; with several steps per
    rollout, each step holds whole prompts)."""
    if not by_prompt:
        order = list(range(len(prompt_index)))
        rng.shuffle(order)
        return order
    rows: dict[int, list[int]] = {}
    for i, p in enumerate(prompt_index):
        rows.setdefault(p, []).append(i)
    prompts = list(rows)
    rng.shuffle(prompts)
    return [i for p in prompts for i in rows[p]]


def _backward_step(engine: DeepSpeedEngine, loss: torch.Tensor, micro: Micro, guard: NonFiniteGuard) -> bool:
    """Backward and step; False when the guard skipped this micro-batch's non-finite loss (alignment/nonfinite.py)."""
    if micro.boundary is not None:  # a token-budget cut: the step ends where the cut says, not after G micro-batches
        engine.set_gradient_accumulation_boundary(micro.boundary)
    step = engine.global_steps + 1
    ok = guard.loss(loss, step)
    engine.backward(loss if ok else zero_loss(engine.module.parameters()))
    if engine_step(engine):
        guard.grad_norm(engine, step)
    return ok


def _agg(cfg: PPOConfig, totals: StepTotals):
    return partial(aggregate, mode=cfg.loss_agg(), totals=totals, norm_len=cfg.rollout.max_new_tokens)


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} if rows else {}


def train_critic(
    critic: DeepSpeedEngine,
    capture: ValueCapture,
    exp: Experience,
    cfg: PPOConfig,
    seed: int,
    packing: Packing | None = None,
) -> dict[str, float]:
    """Clipped value loss on each micro-batch, aggregated over its optimizer step (--loss_agg_mode);
    DeepSpeed steps at accumulation boundaries."""
    critic.train()
    dev, rows = model_device(critic.module), []
    guard = NonFiniteGuard(cfg.train.max_nonfinite_skips, "PPO critic")  # --max_nonfinite_skips per iteration
    for micro in _steps(critic, exp, cfg.train, seed, packing):
        mb = micro.exp
        b = mb.batch.to(dev)
        v = value_forward(critic, capture, b, packing)
        loss = value_loss(
            v, mb.values.to(dev), mb.returns.to(dev), b.action_mask, cfg.critic.value_clip, _agg(cfg, micro.totals)
        )
        if _backward_step(critic, loss, micro, guard):
            rows.append({"value_loss": loss.item()})
    return _mean(rows)


def train_actor(
    actor: DeepSpeedEngine,
    exp: Experience,
    cfg: PPOConfig,
    kl_coef: float,
    seed: int,
    packing: Packing | None = None,
    ema: EMA | None = None,
    moe_top_k: int = 0,
) -> dict[str, float]:
    """Clipped (optionally dual-clipped) policy loss, plus β·KL when --use_kl_loss, minus the entropy bonus
    (--entropy_loss_coef), each aggregated over the optimizer step (--loss_agg_mode), plus --aux_loss_coef x
    the MoE router balance loss (moe_top_k > 0)."""
    actor.train()
    eps_low, eps_high = cfg.actor.eps_clip_low_high or (cfg.actor.eps_clip, cfg.actor.eps_clip)
    dev, rows = model_device(actor.module), []
    guard = NonFiniteGuard(cfg.train.max_nonfinite_skips, "PPO actor")  # --max_nonfinite_skips per iteration
    for micro in _steps(actor, exp, cfg.train, seed, packing):
        mb = micro.exp
        b, agg = mb.batch.to(dev), _agg(cfg, micro.totals)
        mask = b.action_mask
        fwd = actor_forward(actor, b, packing, cfg.actor.entropy_coef is not None, moe_top_k)
        logp, ent = fwd.logp, fwd.entropy
        old = logp.detach() if mb.old_logp is None else mb.old_logp.to(dev)  # None: on-policy (needs_old_logprobs)
        objective = POLICY_LOSSES[cfg.actor.policy_loss_type]
        weight = None if mb.is_weight is None else mb.is_weight.to(dev)  # --enable_vllm_is_correction
        ploss, clipfrac = objective(
            logp, old, mb.advantages.to(dev), mask, eps_low, eps_high, cfg.actor.dual_clip, agg, weight
        )
        loss, row = (
            ploss,
            {
                "policy_loss": ploss.item(),
                "clipfrac": clipfrac.item(),
                # how far this update has moved π from the policy that sampled (k3 estimate)
                "approx_kl": masked_mean(kl_estimate(logp.detach(), old, "k3"), mask).item(),
            },
        )
        if cfg.algo.kl.use_loss:
            kl = agg(kl_estimate(logp, mb.ref_logp.to(dev), cfg.algo.kl.estimator), mask)
            loss = loss + kl_coef * kl
            row["kl_loss"] = kl.item()
        if ent is not None:  # --entropy_loss_coef: a bonus for keeping the policy spread (0: logged only)
            if cfg.actor.entropy_coef:
                loss = loss - cfg.actor.entropy_coef * agg(ent, mask)
            row["entropy"] = masked_mean(ent.detach(), mask).item()  # nats per response token
        if fwd.aux is not None:  # --aux_loss_coef: a sparse-MoE actor's router kept balanced
            loss = loss + cfg.model.aux_loss_coef * fwd.aux
            row["aux_loss"] = fwd.aux.item()
        steps = actor.global_steps
        if _backward_step(actor, loss, micro, guard):
            rows.append(row)
        if ema is not None and actor.global_steps != steps:  # an optimizer step was taken: --enable_ema
            ema.update(actor.module)
    return _mean(rows)
