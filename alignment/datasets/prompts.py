"""RL prompts: rendered and tokenized once; over-long prompts are dropped, counted and reported."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from alignment.datasets.formatting import get_field, get_text, prompt_text, require_chat_template
from alignment.datasets.sources import DataError, blend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptSample:
    text: str            # as the policy sees it (chat template / input template applied)
    ids: list[int]
    label: Any           # passed to reward_func / reward servers as `labels` (None without --label_key)


def load_prompts(cfg: Any, tokenizer: Any, spec: str, split: str) -> list[PromptSample]:
    if cfg.apply_chat_template:
        require_chat_template(tokenizer, "--pretrain")
    main = spec == cfg.prompt_data
    rows = blend(spec, cfg.prompt_data_probs if main else None, split, cfg.max_samples, cfg.seed,
                 "--prompt_data" if main else "--eval_dataset")
    out, dropped = [], 0
    for i, row in enumerate(rows):
        text = prompt_text(tokenizer, get_text(row, cfg.input_key, "--input_key", i, spec), cfg.apply_chat_template,
                           cfg.input_template)
        label = get_field(row, cfg.label_key, "--label_key", i, spec) if cfg.label_key else None
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > cfg.prompt_max_len:
            dropped += 1
            continue
        out.append(PromptSample(text, ids, label))
    if dropped:
        log.warning("dropped %d of %d prompts of %s longer than --prompt_max_len %d tokens",
                    dropped, len(rows), spec, cfg.prompt_max_len)
    if not out:
        raise DataError(f"{spec}: all {len(rows)} prompts are longer than --prompt_max_len {cfg.prompt_max_len}; "
                        f"raise --prompt_max_len")
    return out
