"""A committed process reward model as a PPO reward: each response's score is the lowest P(step is good)
over its steps, read at the placeholder that ends each step.

Why the minimum: a solution is as good as its worst step (one wrong step spoils the answer), which is
how the PRM's labels are made (a step after a mistake is "-") and how Math-Shepherd (Wang et al. 2023,
https://arxiv.org/abs/2312.08935) ranks solutions with a PRM. OpenRLHF trains PRMs (train_prm) but its
PPO reads only sequence-classification reward models, so there is no aggregation of its to follow.

A model is a PRM when its config.json has a "prm" entry (alignment.cli.train_prm writes it):
{"placeholder_token": "#", "reward_tokens": ["+", "-"]}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from alignment.datasets.formatting import end_at_eos
from alignment.datasets.process_reward import single_token_id
from alignment.losses.prm import positive_probability
from alignment.models.loading import ModelLoadError, load_causal_lm

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def read_prm_entry(path: str | Path) -> dict | None:
    """The "prm" entry of a local model folder's config.json; None for any other model."""
    config = Path(path) / "config.json"
    if not config.exists():
        return None
    return json.loads(config.read_text()).get("prm")


class ProcessRewardModel:
    """One PRM: texts in, [n] scores in [0, 1] out (the minimum over steps of P(first reward token))."""

    def __init__(
        self,
        path: str,
        entry: dict,
        tokenizer: PreTrainedTokenizerBase,
        dtype: torch.dtype,
        attn: str,
        device: str,
        trust_remote_code: bool = False,
    ):
        if not entry.get("reward_tokens"):
            raise ModelLoadError(
                f"--reward_pretrain {path}: a PRM trained without --reward_tokens has no positive "
                f"token to read a score from; retrain it with e.g. --reward_tokens + -"
            )
        self.placeholder = entry["placeholder_token"]
        self.placeholder_id = single_token_id(tokenizer, self.placeholder, f"--reward_pretrain {path}: its placeholder")
        self.reward_ids = [
            single_token_id(tokenizer, t, f"--reward_pretrain {path}: its reward token") for t in entry["reward_tokens"]
        ]
        self.tokenizer, self.device = tokenizer, device
        model = load_causal_lm(path, dtype, attn, flag="--reward_pretrain", trust_remote_code=trust_remote_code)
        self.model = model.to(device).eval().requires_grad_(False)

    def steps_text(self, text: str) -> str:
        """The query as the PRM was trained to read it: cut at the response's EOS (dropped: training
        texts have none), the last step ended by a placeholder when the policy did not write one."""
        eos = self.tokenizer.eos_token
        text = end_at_eos(text, eos)
        if eos and text.endswith(eos):
            text = text[: -len(eos)]
        text = text.rstrip()
        return text if text.endswith(self.placeholder) else f"{text} {self.placeholder}"

    @torch.no_grad()
    def __call__(self, texts: list[str]) -> torch.Tensor:
        side, self.tokenizer.padding_side = self.tokenizer.padding_side, "right"
        try:
            enc = self.tokenizer(
                [self.steps_text(t) for t in texts], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.device)
        finally:
            self.tokenizer.padding_side = side
        logits = self.model(**enc).logits  # [B, T, V]
        at = (enc["input_ids"] == self.placeholder_id) & enc["attention_mask"].bool()  # [B, T]
        p_good = torch.ones(at.shape, device=logits.device)  # 1 off placeholders: min ignores it
        p_good[at] = positive_probability(logits[at], self.reward_ids)
        return p_good.min(dim=-1).values.float().cpu()  # [B]
