"""The frozen reference policy of DPO and KTO (and PPO's KL penalty later), and KD's teacher.

Each rank holds a full copy: the tiny and small models this targets fit, and it keeps the
reference out of ZeRO's collectives. `--ref_offload` keeps it in CPU memory; its forward runs
there and only the [S] log-probs come back to the training device.
"""

from __future__ import annotations

import logging

import torch

from alignment.config.pairs import Reference
from alignment.datasets.batch import Batch
from alignment.losses.logprobs import sequence_logps
from alignment.models.builder import ModelSetup
from alignment.models.loading import load_causal_lm, resolve_model_path
from alignment.trainers.sft import forward_logits

log = logging.getLogger(__name__)


class ReferenceModel:
    def __init__(
        self,
        name: str,
        dtype: torch.dtype,
        attn: str,
        device: str,
        offload: bool,
        flag: str,
        trust_remote_code: bool = False,
    ):
        self.device = "cpu" if offload else device
        path = resolve_model_path(name, flag)
        self.model = (
            load_causal_lm(path, dtype, attn, flag=flag, trust_remote_code=trust_remote_code).to(self.device).eval()
        )
        self.model.requires_grad_(False)
        log.info("frozen %s %s on %s", flag, name, self.device)

    @torch.no_grad()
    def sequence_logps(self, batch: Batch) -> torch.Tensor:
        """Summed response log-probs [S], on the batch's device."""
        home = batch.input_ids.device
        b = batch.to(self.device)
        out = sequence_logps(
            forward_logits(self.model, b), b.input_ids, b.loss_mask, b.segments(), b.num_samples, b.branches
        )
        return out.to(home)

    @torch.no_grad()
    def logits(self, batch: Batch) -> torch.Tensor:
        """[B, T, V] logits (KD's teacher), on the batch's device."""
        return forward_logits(self.model, batch.to(self.device)).to(batch.input_ids.device)


def reference_for(ref: Reference, setup: ModelSetup, device: str) -> ReferenceModel:
    name = ref.model_name_or_path or setup.path  # --pretrain as resolved (at its --revision)
    flag = "--ref_pretrain" if ref.model_name_or_path else "--pretrain"
    return ReferenceModel(name, setup.precision.dtype, setup.attn, device, ref.offload, flag, setup.trust_remote_code)
