"""Supervised fine-tuning: next-token NLL on response tokens (or all tokens in --pretrain_mode)."""

from __future__ import annotations

import torch

from alignment.datasets.batch import Batch, TokenizedSample, collate_packed, collate_padded
from alignment.datasets.images import processor_of
from alignment.distributed.collectives import sum_across_ranks
from alignment.losses.nll import sft_loss
from alignment.models.moe import forward_with_aux
from alignment.trainers.base import Trainer, eval_shard


def forward_logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """[B, T, V] logits for a padded or packed batch."""
    return forward_with_aux(model, batch, 0)[0]


class SFTTrainer(Trainer):
    stage = "sft"

    def __init__(self, *args, mask_dtype: torch.dtype | None = torch.bool, moe_top_k: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.mask_dtype = mask_dtype  # block-mask form the attention implementation wants
        self.moe_top_k = moe_top_k  # > 0: add --aux_loss_coef x the router balance loss

    def collate(self, items: list[TokenizedSample]) -> Batch:
        if self.cfg.ds.packing_samples:
            batch = collate_packed(items, self.mask_dtype, self.cfg.data.max_len)
        else:
            batch = collate_padded(items, self.tokenizer.pad_token_id, processor_of(self.tokenizer))
        return batch.to(self.rt.torch_device)

    def loss_on(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logits, aux = forward_with_aux(self.engine, batch, self.moe_top_k)
        loss, metrics = self.objective(logits, batch)
        if aux is None:
            return loss, metrics
        return loss + self.cfg.model.aux_loss_coef * aux, {**metrics, "aux_loss": aux.item()}

    def objective(self, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss on the model's logits [B, T, V] (before the MoE balance term) and its extra metrics."""
        return sft_loss(logits, batch.input_ids, batch.loss_mask), {}

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        """Token-weighted NLL over the whole eval set; ranks take equal-size shards (padded with
        weight-0 repeats) so ZeRO-3's collective forwards stay in step."""
        self.engine.eval()
        total = torch.zeros(2, dtype=torch.float64)
        for i, weight in eval_shard(
            len(self.eval_set), self.rt.dp_rank, self.rt.dp_size
        ):  # one sample at a time keeps the token weighting exact
            batch = self.collate([self.eval_set[i]])
            nll = sft_loss(forward_logits(self.engine, batch), batch.input_ids, batch.loss_mask)
            tokens = float(batch.loss_mask[:, 1:].sum())
            total += torch.tensor([nll.item() * tokens * weight, tokens * weight], dtype=torch.float64)
        sum_across_ranks(total)
        self.engine.train()
        return {"loss": (total[0] / total[1].clamp(min=1)).item()}
