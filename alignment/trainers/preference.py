"""Reward-model, DPO and KTO training loops on the shared `Trainer` (checkpoints, resume, logging).

Each micro-batch is one forward pass of the engine over chosen+rejected (or the KTO samples);
the math is in `alignment.losses.preference`.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from alignment.datasets.batch import Batch
from alignment.datasets.images import processor_of
from alignment.datasets.preference import PairBatch, PairSample, collate_pairs
from alignment.datasets.unpaired import UnpairedBatch, UnpairedSample, collate_unpaired
from alignment.distributed.collectives import mean_across_ranks, sum_across_ranks
from alignment.losses.logprobs import sequence_logps
from alignment.losses.moe import load_balancing_loss
from alignment.losses.nll import sft_loss
from alignment.losses.preference import dpo_loss, kto_kl_estimate, kto_loss, pairwise_rm_loss, pairwise_rm_losses
from alignment.models.moe import forward_with_aux, real_tokens, routed
from alignment.models.reward_model import ValueCapture, export_names
from alignment.trainers.base import Trainer, eval_shard
from alignment.trainers.reference import ReferenceModel
from alignment.trainers.sft import forward_logits

log = logging.getLogger(__name__)


class _PairTrainer(Trainer):
    def __init__(self, *args, mask_dtype: torch.dtype | None = torch.bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_dtype = mask_dtype
        if self.cfg.ds.packing_samples:
            log.info(
                "%s: pairs packed %s",
                self.stage,
                "over their shared prompt (computed once per pair)"
                if mask_dtype is not None
                else "as two sequences (flash-attention's varlen path has no shared-prompt mask)",
            )

    def collate(self, items: list[PairSample]) -> PairBatch:
        pb = collate_pairs(
            items,
            self.cfg.ds.packing_samples,
            self.tokenizer.pad_token_id,
            self.mask_dtype,
            self.cfg.data.max_len,
            processor_of(self.tokenizer),
        )
        return PairBatch(pb.batch.to(self.rt.torch_device), pb.margins.to(self.rt.torch_device), pb.num_pairs)

    def eval_batches(self):
        """(PairBatch, weight) over this rank's share of the eval set, micro-batch sized."""
        shard = eval_shard(len(self.eval_set), self.rt.dp_rank, self.rt.dp_size)
        size = self.cfg.train.micro_batch_size
        for start in range(0, len(shard), size):
            chunk = shard[start : start + size]
            yield self.collate([self.eval_set[i] for i, _ in chunk]), torch.tensor([w for _, w in chunk])


class RewardModelTrainer(_PairTrainer):
    stage = "rm"

    def __init__(self, *args, moe_top_k: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.capture = ValueCapture(self.engine.module)
        self.stats: dict[str, float] = {}
        self.moe_top_k = moe_top_k  # > 0: add --aux_loss_coef x the router balance loss

    def rewards(self, batch: Batch, top_k: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[S] value at each sequence's last token, and the router balance loss when top_k > 0."""
        with routed(self.engine, top_k) as router:
            self.engine(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                use_cache=False,
            )
        rows, cols = batch.last_token()
        values = self.capture.take()[rows, cols]
        aux = load_balancing_loss(tuple(router), top_k, real_tokens(batch)) if top_k else None
        return (values.float() if self.cfg.model.compute_fp32_loss_enable else values), aux

    def loss_on(self, pb: PairBatch) -> tuple[torch.Tensor, dict[str, float]]:
        r, aux = self.rewards(pb.batch, self.moe_top_k)
        chosen, rejected = r[: pb.num_pairs], r[pb.num_pairs :]
        margin = pb.margins.to(r.dtype) if self.cfg.model.margin_loss_enable else None
        loss = pairwise_rm_loss(
            chosen, rejected, margin, self.cfg.model.loss_type, self.cfg.model.center_rewards_coefficient
        )
        metrics = {
            "acc": (chosen > rejected).float().mean().item(),
            "chosen_reward": chosen.mean().item(),
            "rejected_reward": rejected.mean().item(),
        }
        if aux is not None:
            loss, metrics["aux_loss"] = loss + self.cfg.model.aux_loss_coef * aux, aux.item()
        return loss, metrics

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        """Pairwise accuracy, loss, and the mean/std of all rewards (PPO's --normalize_reward uses them)."""
        self.engine.eval()
        # weighted sums: pairs, correct, loss, rewards, rewards², reward count
        acc = torch.zeros(6, dtype=torch.float64)
        for pb, w in self.eval_batches():
            r = self.rewards(pb.batch)[0].double()
            c, rj = r[: pb.num_pairs], r[pb.num_pairs :]
            w = w.double().to(r.device)
            margin = pb.margins.to(r.device, r.dtype) if self.cfg.model.margin_loss_enable else None
            losses = pairwise_rm_losses(  # the training loss, per pair
                c, rj, margin, self.cfg.model.loss_type, self.cfg.model.center_rewards_coefficient
            )
            both = torch.cat([c, rj])
            acc += torch.stack(
                [
                    w.sum(),
                    (w * (c > rj)).sum(),
                    (w * losses).sum(),
                    (w.repeat(2) * both).sum(),
                    (w.repeat(2) * both**2).sum(),
                    2 * w.sum(),
                ]
            ).cpu()
        n, correct, loss, s1, s2, count = sum_across_ranks(acc).tolist()
        mean = s1 / count
        std = max(s2 / count - mean**2, 0.0) ** 0.5
        self.stats = {"mean": mean, "std": std}
        self.engine.train()
        return {"acc": correct / n, "loss": loss / n, "reward_mean": mean, "reward_std": std}

    def final_config(self) -> dict[str, Any]:
        if not self.stats:  # no eval during training: measure on (up to 512 of) the training pairs
            self.eval_set, saved = self.train_set[:512], self.eval_set
            self.eval_metrics()
            self.eval_set = saved
        return {**self.stats, "value_head_prefix": self.cfg.ds.value_head_prefix}

    def export_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return export_names(state, self.cfg.ds.value_head_prefix)


class DPOTrainer(_PairTrainer):
    """DPO, cDPO (--label_smoothing) and IPO (--ipo), optionally + NLL on chosen (--nll_loss_coef)."""

    stage = "dpo"

    def __init__(self, *args, ref: ReferenceModel, moe_top_k: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.ref = ref
        self.moe_top_k = moe_top_k  # > 0: add --aux_loss_coef x the router balance loss

    def _terms(self, pb: PairBatch, top_k: int = 0):
        b, n = pb.batch, pb.num_pairs
        logits, aux = forward_with_aux(self.engine, b, top_k)
        policy = sequence_logps(logits, b.input_ids, b.loss_mask, b.segments(), b.num_samples, b.branches)
        ref = self.ref.sequence_logps(b)
        out = dpo_loss(
            policy[:n],
            policy[n:],
            ref[:n],
            ref[n:],
            self.cfg.model.beta,
            self.cfg.model.label_smoothing,
            self.cfg.model.ipo_enable,
        )
        return logits, out, aux

    def loss_on(self, pb: PairBatch) -> tuple[torch.Tensor, dict[str, float]]:
        logits, out, aux = self._terms(pb, self.moe_top_k)
        loss, metrics = out.loss, _pair_metrics(out)
        if self.cfg.model.nll_loss_coef > 0:
            loss = loss + self.cfg.model.nll_loss_coef * chosen_nll(logits, pb)
        if aux is not None:
            loss, metrics["aux_loss"] = loss + self.cfg.model.aux_loss_coef * aux, aux.item()
        return loss, metrics

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        self.engine.eval()
        sums = torch.zeros(4, dtype=torch.float64)  # pairs, loss, correct, margin
        for pb, w in self.eval_batches():
            _, out, _ = self._terms(pb)
            w = w.double()
            margin = (out.chosen_reward - out.rejected_reward).double().cpu()
            sums += torch.stack(
                [w.sum(), w.sum() * out.loss.double().cpu(), (w * (margin > 0)).sum(), (w * margin).sum()]
            )
        n, loss, correct, margin = sum_across_ranks(sums).tolist()
        self.engine.train()
        # eval loss weights each micro-batch's mean by its real pairs: exact when batches are full
        return {"loss": loss / n, "reward_acc": correct / n, "reward_margin": margin / n}


def chosen_nll(logits: torch.Tensor, pb: PairBatch) -> torch.Tensor:
    """SFT's NLL over the chosen responses' tokens (samples 0..N-1 of the batch)."""
    b = pb.batch
    seg = b.segments()
    sample = seg if seg is not None else torch.arange(b.input_ids.shape[0], device=b.input_ids.device)[:, None]
    return sft_loss(logits, b.input_ids, b.loss_mask * (sample < pb.num_pairs))


def _pair_metrics(out) -> dict[str, float]:
    margin = out.chosen_reward - out.rejected_reward
    return {
        "chosen_reward": out.chosen_reward.mean().item(),
        "rejected_reward": out.rejected_reward.mean().item(),
        "reward_acc": (margin > 0).float().mean().item(),
        "reward_margin": margin.mean().item(),
    }


class KTOTrainer(Trainer):
    stage = "kto"

    def __init__(self, *args, ref: ReferenceModel, mask_dtype: torch.dtype | None = torch.bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.ref, self.mask_dtype = ref, mask_dtype

    def collate(self, items: list[UnpairedSample]) -> UnpairedBatch:
        ub = collate_unpaired(
            items, self.cfg.ds.packing_samples, self.tokenizer.pad_token_id, self.mask_dtype, self.cfg.data.max_len
        )
        dev = self.rt.torch_device
        return UnpairedBatch(ub.batch.to(dev), ub.mismatched.to(dev), ub.desirable.to(dev))

    def _logps(self, batch: Batch) -> torch.Tensor:
        return sequence_logps(
            forward_logits(self.engine, batch),
            batch.input_ids,
            batch.loss_mask,
            batch.segments(),
            batch.num_samples,
            batch.branches,
        )

    def _kl(self, ub: UnpairedBatch) -> torch.Tensor:
        """KL reference point z, averaged across ranks (every rank runs this once per micro-batch)."""
        with torch.no_grad():
            z = kto_kl_estimate(self._logps(ub.mismatched), self.ref.sequence_logps(ub.mismatched))
        return torch.tensor(mean_across_ranks({"kl": z.item()})["kl"], device=z.device)

    def loss_on(self, ub: UnpairedBatch) -> tuple[torch.Tensor, dict[str, float]]:
        kl = self._kl(ub)
        out = kto_loss(
            self._logps(ub.batch),
            self.ref.sequence_logps(ub.batch),
            ub.desirable,
            kl,
            self.cfg.model.beta,
            self.cfg.model.desirable_loss_weight,
            self.cfg.model.undesirable_loss_weight,
        )
        return out.loss, {"kl": kl.item(), **_kto_reward_metrics(out.rewards, ub.desirable)}

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        """Mean implicit reward β·log(π/ref) of desirable and undesirable eval samples."""
        self.engine.eval()
        sums = torch.zeros(4, dtype=torch.float64)  # n good, reward good, n bad, reward bad
        shard = eval_shard(len(self.eval_set), self.rt.dp_rank, self.rt.dp_size)
        size = max(2, self.cfg.train.micro_batch_size)
        for start in range(0, len(shard), size):
            chunk = shard[start : start + size]
            ub = self.collate([self.eval_set[i] for i, _ in chunk])
            w = torch.tensor([wt for _, wt in chunk], dtype=torch.float64)
            rewards = (self.cfg.model.beta * (self._logps(ub.batch) - self.ref.sequence_logps(ub.batch))).double().cpu()
            good = ub.desirable.cpu()
            sums += torch.stack(
                [(w * good).sum(), (w * good * rewards).sum(), (w * ~good).sum(), (w * ~good * rewards).sum()]
            )
        n_good, r_good, n_bad, r_bad = sum_across_ranks(sums).tolist()
        self.engine.train()
        good, bad = r_good / max(n_good, 1), r_bad / max(n_bad, 1)
        return {"desirable_reward": good, "undesirable_reward": bad, "reward_gap": good - bad}


def _kto_reward_metrics(rewards: torch.Tensor, desirable: torch.Tensor) -> dict[str, float]:
    good, bad = rewards[desirable], rewards[~desirable]
    # an all-desirable micro-batch has no undesirable mean: report 0 rather than NaN
    return {
        "desirable_reward": good.mean().item() if len(good) else 0.0,
        "undesirable_reward": bad.mean().item() if len(bad) else 0.0,
    }
