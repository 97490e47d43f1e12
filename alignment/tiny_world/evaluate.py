"""Held-out greedy exact-match accuracy on the arithmetic task (scored by the rule-based reward)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from alignment.datasets.formatting import prompt_text
from alignment.losses.nll import token_logprobs
from alignment.tiny_world.paths import tiny_dir
from alignment.tiny_world.reward import score


@dataclass
class EvalResult:
    accuracy: float
    n: int
    examples: list[tuple[str, str, str]]  # (question, response, label) for the first few
    correct: list[bool]  # per evaluated row, in file order


@torch.no_grad()
def greedy_accuracy(
    model_dir: str | Path,
    eval_file: str | Path | None = None,
    limit: int | None = None,
    batch_size: int = 64,
    max_new_tokens: int = 16,
) -> EvalResult:
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"  # generation continues at the right edge of every row
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = heldout_rows(eval_file)
    rows = rows[:limit] if limit else rows
    correct, examples, per_row = 0, [], []
    for chunk, _, enc, out in generations(model, tok, rows, batch_size, max_new_tokens, do_sample=False):
        responses = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for r, resp in zip(chunk, responses):
            per_row.append(bool(score(resp, r["label"])))
            correct += int(per_row[-1])
            if len(examples) < 5:
                examples.append((r["input"], resp.strip(), r["label"]))
    return EvalResult(correct / len(rows), len(rows), examples, per_row)


def heldout_rows(eval_file: str | Path | None = None) -> list[dict]:
    """The held-out prompts (the tiny world's test split unless `eval_file` is given)."""
    path = Path(eval_file or tiny_dir() / "prompts" / "test.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def generations(model, tok, rows: list[dict], chunk_size: int, max_new_tokens: int, **sampling):
    """Per chunk of rows: (rows, rendered prompts, their encoding, the continuations `sampling` asks
    `generate()` for, prompt tokens included)."""
    for start in range(0, len(rows), chunk_size):
        chunk = rows[start : start + chunk_size]
        prompts = [prompt_text(tok, r["context_messages"], True, None) for r in chunk]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            **sampling,
        )
        yield chunk, prompts, enc, out


def sampled(policy, tok, rows: list[dict], samples: int, max_new_tokens: int):
    """`samples` continuations of each row at temperature 1, as PPO samples them, 32 rows at a time."""
    how = {"do_sample": True, "temperature": 1.0, "top_k": 0, "num_return_sequences": samples}
    return generations(policy, tok, rows, 32, max_new_tokens, **how)


@dataclass
class AgreementResult:
    pairwise: float  # over (right, wrong) sample pairs of one prompt: how often the RM ranks right above wrong
    pairs: int
    prompts: int


@torch.no_grad()
def rm_agreement(
    rm_dir: str | Path,
    policy_dir: str | Path,
    eval_file: str | Path | None = None,
    limit: int = 200,
    samples: int = 4,
    seed: int = 0,
    max_new_tokens: int = 16,
) -> AgreementResult:
    """Does the reward model agree with the rule-based reward on the policy's own samples?

    Samples `samples` responses per held-out prompt (temperature 1), scores each with the
    rule and the RM, and counts, over every (correct, wrong) pair of the same prompt, how
    often the RM gives the correct one the higher reward: the ranking PPO relies on.
    """

    tok = AutoTokenizer.from_pretrained(policy_dir)
    tok.padding_side = "left"
    policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    rm = AutoModelForSequenceClassification.from_pretrained(rm_dir, num_labels=1, dtype=torch.float32).eval()
    rows = heldout_rows(eval_file)
    torch.manual_seed(seed)
    agree = pairs = used = 0
    for chunk, prompts, enc, out in sampled(policy, tok, rows[:limit], samples, max_new_tokens):
        responses = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        generated = [
            as_generated(t, tok.eos_token)
            for t in tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=False)
        ]
        for i, r in enumerate(chunk):
            mine = responses[i * samples : (i + 1) * samples]
            # scored as PPO scores them: the prompt as rendered + the response as generated (EOS kept)
            texts = [prompts[i] + g for g in generated[i * samples : (i + 1) * samples]]
            batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="right")
            rewards = rm(**batch).logits.squeeze(-1).tolist()
            right = [rw for rw, resp in zip(rewards, mine) if score(resp, r["label"])]
            wrong = [rw for rw, resp in zip(rewards, mine) if not score(resp, r["label"])]
            if right and wrong:
                used += 1
                agree += sum(a > b for a in right for b in wrong)
                pairs += len(right) * len(wrong)
    return AgreementResult(agree / pairs if pairs else float("nan"), pairs, used)


def as_generated(decoded: str, eos: str) -> str:
    """A decoded response up to and including its EOS (generate() pads finished rows after it)."""
    return decoded.split(eos, 1)[0] + eos if eos in decoded else decoded


@torch.no_grad()
def kl_to_reference(
    policy_dir: str | Path,
    ref_dir: str | Path,
    eval_file: str | Path | None = None,
    limit: int = 300,
    samples: int = 4,
    seed: int = 0,
    max_new_tokens: int = 16,
) -> float:
    """KL(policy ‖ reference) per response, measured after training: the mean over the policy's own
    samples (temperature 1) on held-out prompts of Σ_t log π(y_t) − log π_ref(y_t) (the k1 estimate
    PPO logs). For runs without a KL term, which log none."""

    tok = AutoTokenizer.from_pretrained(policy_dir)
    tok.padding_side = "left"
    policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
    ref = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=torch.float32).eval()
    rows = heldout_rows(eval_file)
    torch.manual_seed(seed)
    total, n = 0.0, 0
    for _, _, enc, out in sampled(policy, tok, rows[:limit], samples, max_new_tokens):
        prompt_len = enc["input_ids"].shape[1]
        response = out[:, prompt_len:]
        # response tokens up to and including the first EOS; pads after it are not actions
        ended = (response == tok.eos_token_id).int().cumsum(1)
        action = ((ended == 0) | ((ended == 1) & (response == tok.eos_token_id))).float()
        attention = torch.cat([enc["attention_mask"].repeat_interleave(samples, 0), action.long()], 1)
        positions = (attention.cumsum(1) - 1).clamp(min=0)  # left padding: as generate() placed the tokens
        lp = [
            token_logprobs(m(input_ids=out, attention_mask=attention, position_ids=positions).logits, out)[
                :, prompt_len - 1 :
            ]
            for m in (policy, ref)
        ]
        total += ((lp[0] - lp[1]) * action).sum().item()
        n += out.shape[0]
    return total / n
