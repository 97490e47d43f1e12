"""A rollout as training tensors: prompt + response right-padded into one row per sample.

`action_mask[b, t]` is 1 where token t+1 of row b is a response token, so it lines up with the
log-prob of predicting that token from position t (logits[:, :-1]) — the layout every PPO
quantity (log-probs, values, KL, advantages) uses here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from alignment.datasets.images import loaded_inputs, merge_image_inputs
from alignment.losses.moe import load_balancing_loss
from alignment.losses.nll import token_entropy, token_logprobs
from alignment.models.moe import routed
from alignment.ppo.packed import Packing, pack, packed_token_entropy, packed_token_logprobs
from alignment.rollout.types import Rollout

if TYPE_CHECKING:
    from transformers import ProcessorMixin


@dataclass
class SequenceBatch:
    sequences: torch.Tensor  # [B, L] long
    attention_mask: torch.Tensor  # [B, L] long
    action_mask: torch.Tensor  # [B, L-1] float
    prompt_index: list[int]
    # a vision-language actor's image tensors, one dict per row (datasets.images.image_inputs); empty for text
    images: list[dict[str, torch.Tensor]] = field(default_factory=list)

    def to(self, device: str | torch.device) -> "SequenceBatch":
        return SequenceBatch(
            self.sequences.to(device),
            self.attention_mask.to(device),
            self.action_mask.to(device),
            self.prompt_index,
            [{k: v.to(device) for k, v in row.items()} for row in self.images],
        )

    def rows(self, start: int, end: int) -> "SequenceBatch":
        return SequenceBatch(
            self.sequences[start:end],
            self.attention_mask[start:end],
            self.action_mask[start:end],
            self.prompt_index[start:end],
            self.images[start:end],
        )

    def pick(self, idx: list[int]) -> "SequenceBatch":
        return SequenceBatch(
            self.sequences[idx],
            self.attention_mask[idx],
            self.action_mask[idx],
            [self.prompt_index[i] for i in idx],
            [self.images[i] for i in idx] if self.images else [],
        )

    def image_inputs(self) -> dict[str, torch.Tensor]:
        """The rows' image tensors as the model's keyword arguments (pixel_values, ...); {} for text."""
        return merge_image_inputs(self.images) if self.images else {}

    @property
    def width(self) -> int:
        """Columns up to the longest row's last real token (rows are right-padded)."""
        return int(self.attention_mask.sum(-1).max()) if len(self.prompt_index) else 0

    def trimmed(self) -> "SequenceBatch":
        """The same rows without the padding columns every row has (a micro-batch of short rows cut
        from a batch padded to a longer one): causal attention makes the real tokens' outputs equal."""
        w = self.width
        return SequenceBatch(
            self.sequences[:, :w],
            self.attention_mask[:, :w],
            self.action_mask[:, : w - 1],
            self.prompt_index,
            self.images,
        )

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.action_mask.sum(-1)

    @property
    def prompt_lengths(self) -> list[int]:
        """Tokens before each row's first response token (an agent's feedback tokens, also unmasked in
        action_mask, come after it); a row without response tokens is all prompt."""
        first = self.action_mask.ne(0).float().argmax(-1) + 1
        return torch.where(self.action_mask.ne(0).any(-1), first, self.attention_mask.sum(-1)).tolist()


def rollout_to_batch(rollout: Rollout, pad_id: int, processor: ProcessorMixin | None = None) -> SequenceBatch:
    """`processor`: a vision-language actor's, for the rollout's images (one tensor set per prompt's images)."""
    rows = [p + r for p, r in zip(rollout.prompt_ids, rollout.response_ids)]
    width = max(len(r) for r in rows)
    seq = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(seq)
    action = torch.zeros(len(rows), width - 1)
    for i, (p, r) in enumerate(zip(rollout.prompt_ids, rollout.response_ids)):
        seq[i, : len(p) + len(r)] = torch.tensor(p + r)
        attn[i, : len(p) + len(r)] = 1
        action[i, len(p) - 1 : len(p) + len(r) - 1] = torch.tensor(rollout.response_mask(i), dtype=action.dtype)
    return SequenceBatch(seq, attn, action, list(rollout.prompt_index), _row_images(rollout, processor))


def _row_images(rollout: Rollout, processor: ProcessorMixin) -> list[dict[str, torch.Tensor]]:
    if not any(rollout.images):
        return []
    done: dict[tuple[bytes, ...], dict[str, torch.Tensor]] = {}  # a prompt's n samples share its images
    for shown in map(tuple, rollout.images):
        if shown not in done:
            done[shown] = loaded_inputs(processor, list(shown), "a rollout's image")
    return [done[tuple(shown)] for shown in rollout.images]


def behaviour_logprobs(rollout: Rollout, batch: SequenceBatch) -> torch.Tensor:
    """[B, L-1] the engine's log-probs of the tokens it sampled, in action_mask's layout (--async_train:
    the policy that sampled is one update behind the trained one, so the PPO ratio is taken against these)."""
    if len(rollout.logprobs) != len(rollout):
        raise ValueError(
            f"{len(rollout.logprobs)} log-prob rows for {len(rollout)} responses: the engine was not "
            "asked for them (SamplingParams.logprobs)"
        )
    out = torch.zeros(batch.action_mask.shape)
    for i, (p, lp) in enumerate(zip(rollout.prompt_ids, rollout.logprobs)):
        if len(lp) != len(rollout.response_ids[i]):
            raise ValueError(f"response {i}: {len(lp)} log-probs for {len(rollout.response_ids[i])} tokens")
        out[i, len(p) - 1 : len(p) - 1 + len(lp)] = torch.tensor(lp)
    return out * batch.action_mask


def action_logprobs(model: torch.nn.Module, batch: SequenceBatch, packing: Packing | None = None) -> torch.Tensor:
    """[B, L-1] log π(token t+1 | ≤ t), zero off the response. `packing`: run the forward pass on
    packed rows (--packing_samples; alignment/ppo/packed.py)."""
    return actor_forward(model, batch, packing, with_entropy=False).logp


@dataclass
class ActorForward:
    logp: torch.Tensor  # [B, L-1] log-probs of the response tokens, zero elsewhere
    entropy: torch.Tensor | None  # [B, L-1] their next-token distributions' entropy (--entropy_loss_coef)
    aux: torch.Tensor | None  # the MoE router balance loss over the real tokens (--aux_loss_coef)


def actor_forward(
    model: torch.nn.Module,
    batch: SequenceBatch,
    packing: Packing | None = None,
    with_entropy: bool = True,
    moe_top_k: int = 0,
) -> ActorForward:
    """action_logprobs and, from the same forward pass, the entropy of each response token's next-token
    distribution and (moe_top_k > 0) the router load-balancing loss."""
    mask = batch.action_mask
    with routed(model, moe_top_k) as router:
        if packing is None:
            logits = model(
                input_ids=batch.sequences, attention_mask=batch.attention_mask, **batch.image_inputs()
            ).logits
            real = batch.attention_mask
        else:
            rows = pack(batch.sequences, batch.attention_mask, packing, prompt_lengths=batch.prompt_lengths)
            logits = model(**rows.forward_kwargs()).logits
            real = torch.zeros_like(rows.input_ids)
            real[rows.dst] = 1
    aux = load_balancing_loss(tuple(router), moe_top_k, real.reshape(-1)) if moe_top_k else None
    if packing is None:
        ent = token_entropy(logits) * mask if with_entropy else None
        return ActorForward(token_logprobs(logits, batch.sequences) * mask, ent, aux)
    shape = tuple(batch.sequences.shape)
    ent = packed_token_entropy(logits, rows, shape) * mask if with_entropy else None
    return ActorForward(packed_token_logprobs(logits, rows, shape) * mask, ent, aux)
