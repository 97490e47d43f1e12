"""On-policy distillation (OpenRLHF's train_opd): each micro-batch of prompts is answered by the student
itself (the batched HF engine on the training model), and the student learns to lower its reverse KL to the
frozen teacher on those responses (the math: alignment.losses.opd). The loop, checkpoints, resume and the
commit are the shared trainer's.

Each micro-batch's sampling seed comes from --seed, the rank and the micro-batch's place in the run, so a
run resumed from a checkpoint samples the responses an uninterrupted run would have.
"""

from __future__ import annotations

import torch

from alignment.config.distill import OPDConfig
from alignment.datasets.batch import Batch, TokenizedSample, collate_padded
from alignment.datasets.prompts import PromptSample
from alignment.distributed.collectives import sum_across_ranks
from alignment.losses.kl import kl_estimate
from alignment.losses.nll import token_logprobs
from alignment.losses.opd import sampled_token_loss, topk_loss, topk_reverse_kl
from alignment.models.moe import forward_with_aux
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import SamplingParams
from alignment.trainers.base import Trainer, eval_shard
from alignment.trainers.kd import RemoteTeacher
from alignment.trainers.reference import ReferenceModel
from alignment.trainers.sft import forward_logits


class OPDTrainer(Trainer):
    stage = "opd"
    cfg: OPDConfig

    def __init__(self, *args, teacher: ReferenceModel | RemoteTeacher, moe_top_k: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher, self.moe_top_k = teacher, moe_top_k

    def collate(self, items: list[PromptSample]) -> list[PromptSample]:
        return items  # the sequences are made in loss_on, from the student's own samples

    def respond(self, prompts: list[PromptSample], salt: int) -> tuple[Batch, list[list[int]]]:
        """The student's sampled responses as a padded batch (loss on the response tokens), and the responses.
        `salt` tells apart the draws of one step (0: training, 1 + offset: the eval chunk starting there)."""
        cfg, tok = self.cfg, self.tokenizer
        epoch, micro = self.position
        seed = hash((cfg.train.seed, self.rt.dp_rank, epoch, micro, salt)) % 2**31
        engine = HFEngine(
            self.engine.module,
            tok.eos_token_id,
            tok.pad_token_id,
            len(prompts),
            self.rt.torch_device,
            synced_gpus=cfg.ds.zero_stage == 3 and self.rt.world_size > 1,
        )
        rollout = engine.generate(
            [p.ids for p in prompts],
            SamplingParams(cfg.generate.max_new_tokens, cfg.generate.temperature, cfg.generate.top_p, seed=seed),
        )
        samples, responses = [], []
        for prompt, response in zip(rollout.prompt_ids, rollout.response_ids):
            response = response[: cfg.data.max_len - len(prompt)]  # prompt + response <= --max_len
            samples.append(TokenizedSample(prompt + response, [0] * len(prompt) + [1] * len(response)))
            responses.append(response)
        return collate_padded(samples, tok.pad_token_id).to(self.rt.torch_device), responses

    def loss_on(self, prompts: list[PromptSample]) -> tuple[torch.Tensor, dict[str, float]]:
        batch, _ = self.respond(prompts, 0)
        logits, aux = forward_with_aux(self.engine, batch, self.moe_top_k)
        teacher = self.teacher.logits(batch)
        if self.cfg.opd.topk > 0:
            loss, kl = topk_loss(logits, teacher, batch.loss_mask, self.cfg.opd.topk, self.cfg.opd.kd_temperature)
        else:
            loss, kl = sampled_token_loss(logits, teacher, batch.input_ids, batch.loss_mask, self.cfg.opd.kl_estimator)
        metrics = {"opd_loss": kl.item(), "response_length": batch.loss_mask.sum(1).float().mean().item()}
        if aux is None:
            return loss, metrics
        return loss + self.cfg.model.aux_loss_coef * aux, {**metrics, "aux_loss": aux.item()}

    @torch.no_grad()
    def eval_metrics(self) -> dict[str, float]:
        """On the eval prompts, sampled as in training: the token-mean KL to the teacher (eval_kl), the mean
        response length and, with --label_key, the share of responses containing the label (eval/label_match)."""
        self.engine.eval()
        kl_sum, tokens, rows, matched = 0.0, 0.0, 0.0, 0.0
        shard = eval_shard(len(self.eval_set), self.rt.dp_rank, self.rt.dp_size)
        step = self.cfg.train.micro_batch_size
        for start in range(0, len(shard), step):
            part = shard[start : start + step]
            prompts = [self.eval_set[i] for i, _ in part]
            weights = torch.tensor([w for _, w in part])
            batch, responses = self.respond(prompts, 1 + start)
            kl = self._token_kl(batch)  # [B, T-1]
            mask = batch.loss_mask[:, 1:].float()
            kl_sum += float(((kl * mask).sum(1) * weights).sum())
            tokens += float((mask.sum(1) * weights).sum())
            rows += float(weights.sum())
            matched += sum(
                w * _contains(self.tokenizer.decode(r, skip_special_tokens=True), p.label)
                for p, r, w in zip(prompts, responses, weights.tolist())
            )
        total = sum_across_ranks(torch.tensor([kl_sum, tokens, rows, matched], dtype=torch.float64))
        self.engine.train()
        out = {"kl": (total[0] / total[1].clamp(min=1)).item(), "mean_response_length": (total[1] / total[2]).item()}
        if self.cfg.data.label_key:
            out["label_match"] = (total[3] / total[2]).item()
        return out

    def _token_kl(self, batch: Batch) -> torch.Tensor:
        student, teacher = forward_logits(self.engine, batch), self.teacher.logits(batch)
        if self.cfg.opd.topk > 0:
            return topk_reverse_kl(student[:, :-1], teacher[:, :-1], self.cfg.opd.topk, self.cfg.opd.kd_temperature)
        return kl_estimate(
            token_logprobs(student, batch.input_ids),
            token_logprobs(teacher, batch.input_ids),
            self.cfg.opd.kl_estimator,
        )


def _contains(response: str, label: object) -> float:
    return float(label is not None and str(label).strip() != "" and str(label).strip() in response)
