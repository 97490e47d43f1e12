"""The held-out rows of the `evaluate` stage (alignment/inference/evaluate.py): each row rendered as the model
sees it, by --eval_task: a prompt to answer (with its label and pictures), a chosen and a rejected response to rank,
or a response to score by perplexity. Prompts over --prompt_max_len are dropped, and said so."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alignment.config.evaluate import EvaluateConfig
from alignment.datasets.formatting import (
    as_text,
    get_field,
    get_text,
    prompt_and_response,
    prompt_text,
    require_chat_template,
)
from alignment.datasets.images import image_refs, processor_of, prompt_ids, with_image_items
from alignment.datasets.mixing import blend
from alignment.datasets.sources import DataError
from alignment.datasets.tokenized import image_key
from alignment.inference.postprocess import csft_prefix

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

    from alignment.config.inference import BatchInferenceConfig

log = logging.getLogger("alignment.evaluate")


@dataclass
class EvalRow:
    index: int
    prompt: str  # rendered as the model sees it
    label: Any = None
    question: str = ""  # generate: the prompt as the dataset has it (what a report shows)
    chosen: str | None = None  # pairs: the two responses; perplexity: `chosen` is the response
    rejected: str | None = None
    ids: list[int] | None = None  # generate with images: the prompt's ids, image tokens expanded by the processor
    images: list[str] = field(default_factory=list)  # generate: the row's images (--image_key), in order


def generate_row(
    cfg: EvaluateConfig, tokenizer: PreTrainedTokenizerBase, processor: ProcessorMixin, row: dict, i: int
) -> EvalRow:
    """Row i as a prompt to answer (--eval_task generate): rendered, with its label and, given a processor, images."""
    # a conditional-SFT model asked for a score (--enable_csft): the prefix before the rendered prompt
    given = get_text(row, cfg.data.input_key, "--input_key", i, cfg.data.dataset)
    prompt = csft_prefix(cfg.generate) + prompt_text(
        tokenizer,
        with_image_items(given) if processor and cfg.data.apply_chat_template else given,
        cfg.data.apply_chat_template,
        cfg.data.input_template,
    )
    label = get_field(row, cfg.data.label_key, "--label_key", i, cfg.data.dataset) if cfg.data.label_key else None
    item = EvalRow(
        i,
        prompt,
        label,
        question=as_text(given),
    )
    if processor:
        refs = image_refs(row, cfg.data.image_key, cfg.data.max_images_per_prompt, i, cfg.data.dataset)
        item.ids = prompt_ids(processor, tokenizer, prompt, refs, f"{cfg.data.dataset} row {i}")
        item.images = refs
    return item


def response_row(cfg: EvaluateConfig, tokenizer: PreTrainedTokenizerBase, row: dict, i: int) -> EvalRow:
    """Row i as responses to its prompt: chosen and rejected (--eval_task pairs), or one to score by perplexity."""
    key = cfg.data.prompt_key if cfg.eval.eval_task == "pairs" else cfg.data.input_key
    given = (
        get_text(row, key, f"--{'prompt' if cfg.eval.eval_task == 'pairs' else 'input'}_key", i, cfg.data.dataset)
        if key
        else None
    )
    first_key = cfg.data.chosen_key if cfg.eval.eval_task == "pairs" else cfg.data.output_key
    prompt, first = prompt_and_response(
        tokenizer,
        given,
        get_text(row, first_key, f"--{first_key}", i, cfg.data.dataset),
        cfg.data.apply_chat_template,
        cfg.data.input_template,
    )
    second = (
        prompt_and_response(
            tokenizer,
            given,
            get_text(row, cfg.data.rejected_key, "--rejected_key", i, cfg.data.dataset),
            cfg.data.apply_chat_template,
            cfg.data.input_template,
        )[1]
        if cfg.eval.eval_task == "pairs"
        else None
    )
    return EvalRow(i, prompt, chosen=first, rejected=second)


def load_eval_rows(cfg: EvaluateConfig, tokenizer: PreTrainedTokenizerBase) -> list[EvalRow]:
    if cfg.data.apply_chat_template:
        require_chat_template(tokenizer, "--pretrain")
    rows = blend(
        cfg.data.dataset,
        cfg.data.dataset_probs,
        cfg.data.dataset_split,
        cfg.data.max_samples,
        0,
        image_key=image_key(cfg),
    )
    processor = processor_of(tokenizer) if cfg.with_images else None
    out, dropped = [], 0
    for i, row in enumerate(rows):
        if cfg.eval.eval_task == "generate":
            item = generate_row(cfg, tokenizer, processor, row, i)
        else:
            item = response_row(cfg, tokenizer, row, i)
        if len(item.ids or tokenizer(item.prompt, add_special_tokens=False)["input_ids"]) > cfg.data.prompt_max_len:
            dropped += 1
            continue
        out.append(item)
    return kept(out, len(rows), dropped, cfg, log)


def kept(
    out: list, read: int, dropped: int, cfg: EvaluateConfig | BatchInferenceConfig, said_by: logging.Logger
) -> list:
    """`out`, the rows left of `read` after `dropped` prompts over --prompt_max_len (said once, by the stage's
    logger `said_by`); none left: one line. Evaluation and batch inference read their rows alike."""
    if dropped:
        said_by.warning("dropped %d of %d rows whose prompt is longer than --prompt_max_len %d tokens", dropped, read,
                    cfg.data.prompt_max_len)  # fmt: skip
    if not out:
        raise DataError(
            f"{cfg.data.dataset}: no usable rows ({read} read, {dropped} over --prompt_max_len "
            f"{cfg.data.prompt_max_len}); check --dataset/--dataset_split or raise --prompt_max_len"
        )
    return out
