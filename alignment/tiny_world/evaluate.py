"""Held-out greedy exact-match accuracy on the arithmetic task (scored by the rule-based reward)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from alignment.datasets.formatting import prompt_text
from alignment.tiny_world.paths import tiny_dir
from alignment.tiny_world.reward import score


@dataclass
class EvalResult:
    accuracy: float
    n: int
    examples: list[tuple[str, str, str]]   # (question, response, label) for the first few


@torch.no_grad()
def greedy_accuracy(model_dir: str | Path, eval_file: str | Path | None = None, limit: int | None = None,
                    batch_size: int = 64, max_new_tokens: int = 16) -> EvalResult:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"  # generation continues at the right edge of every row
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in Path(eval_file or tiny_dir() / "prompts" / "test.jsonl").read_text().splitlines()]
    rows = rows[:limit] if limit else rows
    correct, examples = 0, []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        prompts = [prompt_text(tok, r["context_messages"], True, None) for r in chunk]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        responses = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for r, resp in zip(chunk, responses):
            correct += int(score(resp, r["label"]))
            if len(examples) < 5:
                examples.append((r["input"], resp.strip(), r["label"]))
    return EvalResult(correct / len(rows), len(rows), examples)
