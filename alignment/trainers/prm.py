"""Process reward model training (OpenRLHF's train_prm): SFT's engine, collation, loop, checkpoints and
commit, with the loss read only at the placeholder tokens (the math: alignment.losses.prm)."""

from __future__ import annotations

from typing import Any

import torch

from alignment.config.stages import PRMData
from alignment.datasets.process_reward import PRMBatch, PRMSample, layout_targets
from alignment.distributed.collectives import sum_across_ranks
from alignment.losses.prm import prm_loss
from alignment.models.moe import forward_with_aux
from alignment.trainers.base import eval_shard
from alignment.trainers.sft import SFTTrainer


def prm_config_entry(data: PRMData) -> dict[str, Any]:
    """What the committed config.json records under "prm": how a PPO reward reads the model
    (alignment.rewards.process_reward)."""
    return {"placeholder_token": data.placeholder_token, "reward_tokens": data.reward_tokens}


class PRMTrainer(SFTTrainer):
    stage = "prm"

    def __init__(self, *args, reward_ids: list[int] | None, soft: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.reward_ids, self.soft = reward_ids, soft

    def collate(self, items: list[PRMSample]) -> PRMBatch:
        tokens = super().collate([s.as_tokens() for s in items])
        return PRMBatch(tokens, layout_targets(items, tokens).to(tokens.input_ids.device))

    def loss_on(self, batch: PRMBatch) -> tuple[torch.Tensor, dict[str, float]]:
        logits, aux = forward_with_aux(self.engine, batch.tokens, self.moe_top_k)
        terms = prm_loss(logits, batch.tokens.loss_mask.bool(), batch.targets, self.reward_ids, self.soft)
        metrics = {"acc": terms.accuracy.item()}  # OpenRLHF's name: the label token is the argmax at a step
        if aux is None:
            return terms.loss, metrics
        return terms.loss + self.cfg.model.aux_loss_coef * aux, {**metrics, "aux_loss": aux.item()}

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        """Step-weighted loss and accuracy over the whole eval set (equal shards per rank, as SFT's)."""
        self.engine.eval()
        total = torch.zeros(3, dtype=torch.float64)  # loss x steps, correct steps, steps
        for i, weight in eval_shard(len(self.eval_set), self.rt.dp_rank, self.rt.dp_size):
            batch = self.collate([self.eval_set[i]])
            logits, _ = forward_with_aux(self.engine, batch.tokens, 0)
            terms = prm_loss(logits, batch.tokens.loss_mask.bool(), batch.targets, self.reward_ids, self.soft)
            n = terms.steps * weight
            total += torch.tensor([terms.loss.item() * n, terms.accuracy.item() * n, n], dtype=torch.float64)
        sum_across_ranks(total)
        self.engine.train()
        steps = total[2].clamp(min=1)
        return {"loss": (total[0] / steps).item(), "acc": (total[1] / steps).item()}

    def final_config(self) -> dict[str, Any]:
        return {"prm": prm_config_entry(self.cfg.data)}
