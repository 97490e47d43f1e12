"""The batched Hugging Face rollout engine: `generate` with a KV cache on left-padded prompts.

With several responses per prompt (GRPO, RLOO: --n_samples_per_prompt) each prompt is computed once:
one forward pass over the prompts fills the KV cache, which is repeated for the responses before
`generate` continues from it. `generate(num_return_sequences=n)` would repeat the prompts instead,
and compute every one n times (on a 25 M model, 16 prompts x 8 responses of 16 tokens: 1.77 s ->
1.20 s per batch, the same greedy tokens).

Used when --vllm_num_engines is 0 (OpenRLHF's meaning), for evaluation, and by PPO without Ray.
It wraps the model it is given — inside an actor that is the policy itself, so "weight sync"
for this engine is a no-op by construction; `load_weights` exists for a standalone engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import torch

from alignment.datasets.images import PromptImages, image_token_id, loaded_inputs, merge_image_inputs
from alignment.nonfinite import NonFiniteError
from alignment.rollout.types import Rollout, SamplingParams

if TYPE_CHECKING:
    from transformers import Cache, ProcessorMixin


class HFEngine:
    def __init__(
        self,
        model: torch.nn.Module,
        eos_token_id: int | list[int],
        pad_token_id: int,
        batch_size: int = 32,
        device: str | torch.device = "cpu",
        synced_gpus: bool = False,
        processor: ProcessorMixin | None = None,
    ):
        self.model, self.pad_id, self.batch_size, self.device = model, pad_token_id, batch_size, torch.device(device)
        self.processor = processor  # a vision-language model's: turns prompts' images into its image tensors
        # an image placeholder the model samples would stand for an image nobody gave: never generated (a
        # forward pass then finds more placeholders than images)
        self.suppress = [image_token_id(processor)] if processor is not None else None
        # ZeRO-3 over several ranks: every rank's forwards are collectives, so a rank whose responses all ended
        # keeps stepping until every rank is done (transformers' synced_gpus)
        self.synced_gpus = synced_gpus
        self.eos_ids = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)

    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, images: list[PromptImages] | None = None
    ) -> Rollout:
        """`params.n` responses per prompt; prompts are batched `batch_size` at a time. `images`: each prompt's
        images, whose tokens its ids hold expanded (a vision-language model's processor)."""
        if images and self.processor is None:
            raise ValueError("HFEngine.generate: prompts with images need the vision-language model's processor")
        if params.logprobs:  # only --async_train asks, and it generates on vLLM engines (config check)
            raise ValueError("the HF engine does not return sampled-token log-probs; use a vLLM engine")
        out = Rollout()
        was_training = self.model.training
        self.model.eval()
        if params.seed is not None:
            torch.manual_seed(params.seed)
        try:
            for start in range(0, len(prompts), self.batch_size):
                chunk = prompts[start : start + self.batch_size]
                shown = images[start : start + self.batch_size] if images else []
                out.extend(self._generate_chunk(chunk, params, shown), index_offset=start)
        except RuntimeError as e:  # torch.multinomial's on NaN/Inf logits: name the weight, not the sampler
            if "probability tensor contains" not in str(e):
                raise
            raise self._non_finite() from e
        finally:
            self.model.train(was_training)
        return out

    def _non_finite(self) -> Exception:
        bad = next(
            (
                n
                for n, p in self.model.named_parameters()
                if p.is_floating_point() and not bool(torch.isfinite(p).all())
            ),
            None,
        )
        what = f"weight {bad} of the model being sampled holds NaN/Inf" if bad else "its logits went NaN/Inf"
        return NonFiniteError(
            f"generation: the next-token probabilities are NaN/Inf: {what} (an update that overflowed, or a "
            f"damaged model); nothing more is committed: lower --learning_rate, or pass a model with finite weights"
        )

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams, images: list[PromptImages]) -> Rollout:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the right edge
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        sampling: dict[str, Any] = (
            {"do_sample": False}
            if params.greedy
            else {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}
        )
        ids, mask = ids.to(self.device), mask.to(self.device)
        shown = merge_image_inputs([loaded_inputs(self.processor, list(p.files), "a prompt") for p in images])
        pixels = {k: v.to(self.device) for k, v in shown.items()}
        cache = self._prompt_cache(ids, mask, params.n, pixels) if params.n > 1 and width > 1 else None
        seqs = self.model.generate(
            input_ids=ids.repeat_interleave(params.n, 0),
            past_key_values=cache,
            attention_mask=mask.repeat_interleave(params.n, 0),
            max_new_tokens=max(params.budget(len(p)) for p in prompts),
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            synced_gpus=self.synced_gpus,
            suppress_tokens=self.suppress,
            **sampling,
            **({} if cache is not None else pixels),  # a prompt cache holds the images already
        )
        rollout = Rollout()
        for row, seq in enumerate(seqs[:, width:].tolist()):
            k = row // params.n
            # --max_len: this prompt's own budget; the tokens kept are those a generation stopped there draws
            response, finished = _cut_at_eos(seq[: params.budget(len(prompts[k]))], self.eos_ids)
            rollout.prompt_ids.append(list(prompts[k]))
            rollout.response_ids.append(response)
            rollout.prompt_index.append(k)
            rollout.finished.append(finished)
            if images:
                rollout.images.append(list(images[k].files))
        return rollout

    def _prompt_cache(self, ids: torch.Tensor, mask: torch.Tensor, n: int, pixels: dict[str, torch.Tensor]) -> Cache:
        """The KV cache of every prompt but its last token (generate computes that one and samples
        from it), each prompt's repeated n times. Position ids as generate gives left-padded rows."""
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        cache = self.model(
            input_ids=ids[:, :-1],
            attention_mask=mask[:, :-1],
            position_ids=positions[:, :-1],
            use_cache=True,
            **pixels,
        ).past_key_values
        cache.batch_repeat_interleave(n)
        return cache

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy weights in (a chunk at a time); returns how many tensors were loaded."""
        params = self.model.state_dict(keep_vars=True)  # tied weights (lm_head = embed) appear under both names
        n = 0
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in params:
                    raise KeyError(f"HFEngine.load_weights: the engine's model has no parameter {name!r}")
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
                n += 1
        return n


def _cut_at_eos(tokens: list[int], eos_ids: set[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first eos; generate pads finished rows after it."""
    for i, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[: i + 1], True
    return tokens, False
