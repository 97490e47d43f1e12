"""The `evaluate` stage's pieces (`python -m alignment.cli.evaluate`): held-out rows (eval_rows.py), one value per row
on each rank, gathered to rank 0, reduced to the metrics, committed as evaluation.json with a MANIFEST.

Per-row values, not per-rank means, travel between ranks, so the metrics are the same for any number of
ranks (rank r takes rows r, r+W, ...)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from alignment.config.base import public_dict
from alignment.config.evaluate import EvaluateConfig, EvaluateData, EvaluateGenerate
from alignment.datasets.images import PromptImages, processor_of, read_bytes
from alignment.distributed.runtime import Runtime
from alignment.inference.eval_rows import EvalRow
from alignment.models.builder import ModelSetup
from alignment.nonfinite import NonFiniteError
from alignment.outputs import StagedOutput
from alignment.rewards.scorer import FunctionReward, RewardModels
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import SamplingParams

log = logging.getLogger("alignment.evaluate")
EXAMPLES = 8  # rows shown in evaluation.json (and the flow's artifact)


@dataclass
class RowValue:
    index: int
    values: dict[str, float]  # generate: reward, right; pairs: margin, right; perplexity: nll_sum, tokens
    example: dict[str, Any]


def label_match(response: str, label: object) -> bool:
    """Without a reward source: the response's last word, less closing punctuation, is the label
    ("27 + 0 = 27" answers "27"; "127" does not)."""
    words = response.split()
    return bool(words) and words[-1].rstrip(".,;:!?)]\"'") == str(label).strip()


def generate_values(
    cfg: EvaluateConfig,
    setup: ModelSetup,
    rt: Runtime,
    rows: list[EvalRow],
    reward: FunctionReward | RewardModels | None,
) -> list[RowValue]:
    """Greedy responses (the batched HF engine), scored by the reward source, or matched against the
    label when there is none (`reward` None: 1.0 for a match)."""
    tok = setup.tokenizer
    model = setup.causal_lm().to(rt.torch_device).eval()
    engine = HFEngine(
        model,
        tok.eos_token_id,
        tok.pad_token_id,
        batch_size=cfg.generate.micro_batch_size,
        device=rt.torch_device,
        processor=processor_of(tok),
    )
    ids = [r.ids or tok(r.prompt, add_special_tokens=False)["input_ids"] for r in rows]
    shown = [PromptImages(tuple(map(read_bytes, r.images)), ()) for r in rows] if any(r.images for r in rows) else None
    rollout = engine.generate(ids, SamplingParams(cfg.generate.max_new_tokens, greedy=True), shown)
    responses = tok.batch_decode(rollout.response_ids, skip_special_tokens=True)
    raw = tok.batch_decode(rollout.response_ids, skip_special_tokens=False)  # EOS kept, as a reward reads it
    picked = [rows[j] for j in rollout.prompt_index]
    out = []
    for s in range(0, len(picked), cfg.generate.micro_batch_size):
        chunk = slice(s, s + cfg.generate.micro_batch_size)
        rewards = (
            reward(
                [r.prompt + q for r, q in zip(picked[chunk], raw[chunk])],
                [r.prompt for r in picked[chunk]],
                [r.label for r in picked[chunk]],
            ).rewards.tolist()
            if reward is not None
            else [float(label_match(q, r.label)) for r, q in zip(picked[chunk], responses[chunk])]
        )
        for row, response, value in zip(picked[chunk], responses[chunk], rewards):
            out.append(
                RowValue(
                    row.index,
                    {"reward": value, "right": float(value >= cfg.eval.correct_reward)},
                    {
                        "question": row.question,
                        "response": response,
                        "label": row.label,
                        "reward": value,
                        "right": value >= cfg.eval.correct_reward,
                        **({"images": row.images} if row.images else {}),  # what a report shows beside it
                    },
                )
            )
    return out


@torch.no_grad()
def pair_values(generate: EvaluateGenerate, setup: ModelSetup, rt: Runtime, rows: list[EvalRow]) -> list[RowValue]:
    """--pretrain (a reward model) scores both responses of each pair, as PPO's reward reads them."""
    rm = RewardModels(
        [setup.path],
        [1.0],
        setup.tokenizer,
        setup.precision.dtype,
        setup.attn,
        rt.torch_device,
        normalize=False,
        batch_size=generate.micro_batch_size,
        trust_remote_code=setup.trust_remote_code,
    )
    chosen = rm([r.prompt + r.chosen for r in rows], [], []).rewards.tolist()
    rejected = rm([r.prompt + r.rejected for r in rows], [], []).rewards.tolist()
    return [
        RowValue(
            r.index,
            {"margin": c - j, "right": float(c > j)},
            {"question": r.prompt, "response": r.chosen, "label": r.rejected, "right": c > j, "margin": c - j},
        )
        for r, c, j in zip(rows, chosen, rejected)
    ]


@torch.no_grad()
def perplexity_values(data: EvaluateData, setup: ModelSetup, rt: Runtime, rows: list[EvalRow]) -> list[RowValue]:
    """Summed negative log-likelihood of each response's tokens given its prompt, and their count."""
    tok = setup.tokenizer
    model = setup.causal_lm().to(rt.torch_device).eval()
    out = []
    for r in rows:
        head = tok(r.prompt, add_special_tokens=False)["input_ids"]
        ids = tok(r.prompt + r.chosen, add_special_tokens=False)["input_ids"][: data.max_len]
        if len(ids) <= len(head):  # truncated away: nothing of the response to score
            continue
        logits = model(torch.tensor([ids], device=rt.torch_device)).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:], device=rt.torch_device)[:, None])[:, 0]
        nll = -logp[len(head) - 1 :].sum().item()
        out.append(
            RowValue(
                r.index,
                {"nll_sum": nll, "tokens": float(len(ids) - len(head))},
                {"question": r.prompt, "response": r.chosen, "nll": nll / (len(ids) - len(head))},
            )
        )
    return out


def reduce(task: str, values: list[RowValue]) -> dict[str, float]:
    """The committed metrics from every row's values (rank 0, all rows)."""
    n = len(values)
    if task == "perplexity":
        tokens = sum(v.values["tokens"] for v in values)
        nll = sum(v.values["nll_sum"] for v in values) / max(tokens, 1.0)
        return {"perplexity": math.exp(nll), "nll": nll, "rows": float(n)}
    first = "reward" if task == "generate" else "margin"
    mean = sum(v.values[first] for v in values) / n
    right = sum(v.values["right"] for v in values) / n
    return (
        {"accuracy": right, "mean_reward": mean}
        if task == "generate"
        else {"pair_accuracy": right, "mean_margin": mean}
    ) | {"rows": float(n)}


def write_evaluation(cfg: EvaluateConfig, values: list[RowValue], scored_by_rm: bool) -> dict[str, float]:
    """evaluation.json ({"task", "metrics", "n", "examples"}) committed at --output_path; a metric that is
    NaN/Inf (an RM gone non-finite) is refused, never committed."""
    if not values:
        raise ValueError(
            f"--eval_task {cfg.eval.eval_task}: no row left to score (every response truncated by --max_len "
            f"{cfg.data.max_len}); raise --max_len"
        )
    metrics = reduce(cfg.eval.eval_task, values)
    if scored_by_rm:  # accuracy under a reward model's threshold would mean nothing: mean_reward is its measure
        metrics.pop("accuracy", None)
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    if bad:
        raise NonFiniteError(
            f"evaluation of {cfg.model.model_name_or_path}: {', '.join(bad)} not finite; nothing committed"
        )
    with StagedOutput(cfg.ckpt.output_path) as out:
        (out.dir / "evaluation.json").write_text(
            json.dumps(
                {
                    "task": cfg.eval.eval_task,
                    "model": cfg.model.model_name_or_path,
                    "metrics": metrics,
                    "n": len(values),
                    "examples": [v.example for v in values[:EXAMPLES]],
                },
                indent=1,
                default=str,
            )
        )
        out.commit({"stage": "evaluate", "config": public_dict(cfg), "final_metrics": metrics})
    log.info(
        "evaluation of %s: %s (%d rows), committed to %s",
        cfg.model.model_name_or_path,
        ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k != "rows"),
        len(values),
        cfg.ckpt.output_path,
    )
    return metrics
