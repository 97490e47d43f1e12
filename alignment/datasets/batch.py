"""A stage's training samples as tensors: a tokenized sample (ids, loss mask, images), and a micro-batch of them
padded (a sample per row) or packed (several per row, block-causal).

Shared by SFT, the preference stages, KD and OPD (alignment/datasets/sft.py tokenizes SFT's rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from alignment.datasets.images import loaded_inputs, merge_image_inputs
from alignment.datasets.packing import block_causal_mask, first_fit_rows

if TYPE_CHECKING:
    from transformers import ProcessorMixin


@dataclass
class TokenizedSample:
    input_ids: list[int]  # [L]
    loss_mask: list[int]  # [L], 1 where the token is a training target
    images: list[str] = field(default_factory=list)  # its images' references, in placeholder order


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T], 1 on target tokens (never the first of a sample)
    attention_mask: torch.Tensor | None  # [B, T] padding mask, or [B, 1, T, T] block mask when packed
    position_ids: torch.Tensor | None  # [B, T]; restart per sample when packed
    num_samples: int
    lengths: list[int]  # tokens of each sample, in order
    segment_map: torch.Tensor | None = None  # packed: [B, T] sample index of each token, -1 on row padding
    # shared-prompt rows (datasets/shared_prompt.py): [K, 3] (row, column, parent) of each token that is
    # predicted by the logits at `parent`, not at column - 1; None: every token follows its left neighbour
    branches: torch.Tensor | None = None
    # a vision-language model's image tensors for the batch's images, in row order (models.vision.image_inputs)
    images: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def packed(self) -> bool:
        return self.position_ids is not None

    def to(self, device: str | torch.device) -> "Batch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(
            self.input_ids.to(device),
            self.loss_mask.to(device),
            move(self.attention_mask),
            move(self.position_ids),
            self.num_samples,
            self.lengths,
            move(self.segment_map),
            move(self.branches),
            {k: v.to(device) for k, v in self.images.items()},
        )

    def segments(self) -> torch.Tensor | None:
        """[B, T] sample index of each token when packed (row padding: 0, which has no loss-mask
        tokens, so per-sample sums ignore it); None when padded (a sample per row)."""
        return self.segment_map.clamp(min=0) if self.packed else None

    def last_token(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, column) of each sample's last token: where a reward model reads its value. [S], [S]."""
        if self.packed:
            t = self.segment_map.shape[1]
            flat = self.segment_map.reshape(-1)
            real = (flat >= 0).nonzero().squeeze(-1)
            last = torch.full((self.num_samples,), -1, dtype=torch.long, device=flat.device)
            last = last.scatter_reduce(0, flat[real], real, reduce="amax")
            return last // t, last % t
        lengths = torch.tensor(self.lengths, device=self.input_ids.device)
        return torch.arange(len(self.lengths), device=lengths.device), lengths - 1


def collate_padded(samples: list[TokenizedSample], pad_id: int, processor: ProcessorMixin | None = None) -> Batch:
    t = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), t), pad_id, dtype=torch.long)
    loss = torch.zeros((len(samples), t), dtype=torch.long)
    attn = torch.zeros((len(samples), t), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        ids[i, :n] = torch.tensor(s.input_ids)
        loss[i, :n] = torch.tensor(s.loss_mask)
        attn[i, :n] = 1
    batch = Batch(ids, loss, attn, None, len(samples), [len(s.input_ids) for s in samples])
    if any(s.images for s in samples):  # loaded again here: the cache keeps references, not pixels
        batch.images = merge_image_inputs(
            [loaded_inputs(processor, s.images, f"sample {i}") for i, s in enumerate(samples)]
        )
    return batch


def collate_packed(
    samples: list[TokenizedSample], mask_dtype: torch.dtype | None = torch.bool, row_tokens: int | None = None
) -> Batch:
    """The micro-batch's samples packed into rows.

    mask_dtype None: one row [1, sum(L)], no explicit mask, only restarting position ids
    (flash-attention's varlen path). With a mask and `row_tokens`: first-fit rows of at most
    `row_tokens` tokens [R, T], right-padded to the longest row (padding: token 0, loss 0,
    attending only to padding), so attention costs R·T² instead of sum(L)².
    """
    lengths = [len(s.input_ids) for s in samples]
    if mask_dtype is None or row_tokens is None:
        rows = [list(range(len(samples)))]
    else:
        rows = first_fit_rows(lengths, row_tokens)
    width = max(sum(lengths[i] for i in row) for row in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    loss = torch.zeros_like(ids)
    pos = torch.zeros_like(ids)
    seg = torch.full_like(ids, -1)
    for r, row in enumerate(rows):
        col = 0
        for i in row:
            n, s = lengths[i], samples[i]
            ids[r, col : col + n] = torch.tensor(s.input_ids)
            loss[r, col : col + n] = torch.tensor(s.loss_mask)
            pos[r, col : col + n] = torch.arange(n)
            seg[r, col : col + n] = i
            col += n
    mask = None if mask_dtype is None else block_causal_mask(seg, mask_dtype)
    return Batch(ids, loss, mask, pos, len(samples), lengths, seg)
