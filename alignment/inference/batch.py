"""Batch inference's pieces (`python -m alignment.cli.batch_inference`): the round's prompt rows,
samples generated or given, scored, gathered to rank 0 in prompt order, written and committed.
Here, not in the CLI module, so that samples pickle between ranks (a class of a `python -m`
module is __main__'s, which another process can't look up)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alignment.config import BatchInferenceConfig
from alignment.config.base import public_dict
from alignment.datasets.formatting import get_field, get_text, prompt_text, require_chat_template
from alignment.datasets.mixing import blend
from alignment.distributed.runtime import Runtime
from alignment.inference.eval_rows import kept
from alignment.inference.postprocess import POST_PROCESSORS, Scored, csft_prefix
from alignment.models.builder import ModelSetup
from alignment.outputs import StagedOutput
from alignment.rollout.hf_engine import HFEngine
from alignment.rollout.types import SamplingParams
from alignment.rollout.vllm_engine import VLLMEngine

if TYPE_CHECKING:
    from alignment.rewards.scorer import FunctionReward, RewardModels

log = logging.getLogger("alignment.batch_inference")


def this_round(rows: list[dict], cfg: BatchInferenceConfig) -> list[dict]:
    """--rollout_batch_size N --iter k: rows [k*N, (k+1)*N), so each round of an iterative
    pipeline samples prompts the earlier rounds did not; past the end it wraps around, so a
    schedule that runs every night keeps going (a second pass sees the prompts again)."""
    if not cfg.rollout.batch_size or not rows:
        return rows
    start = cfg.generate.iter * cfg.rollout.batch_size
    return [rows[(start + j) % len(rows)] for j in range(min(cfg.rollout.batch_size, len(rows)))]


@dataclass
class PromptRow:
    text: str  # the rendered prompt
    ids: list[int]
    label: Any
    response: str | None  # --eval_task rm: the row's response to score


@dataclass
class Sample:
    index: int  # its prompt's row: samples are gathered back in prompt order
    prompt: str
    response: str  # decoded without special tokens: what output.jsonl holds
    label: Any
    query: str  # prompt + response ending in EOS: what a reward reads (as PPO's queries)
    reward: float | None = None


def load_rows(cfg: BatchInferenceConfig, tokenizer) -> list[PromptRow]:
    """One PromptRow per dataset row; over-long prompts dropped and counted."""
    if cfg.data.apply_chat_template:
        require_chat_template(tokenizer, "--pretrain")
    rows = this_round(
        blend(cfg.data.dataset, cfg.data.dataset_probs, cfg.data.dataset_split, cfg.data.max_samples, cfg.train.seed),
        cfg,
    )
    out, dropped = [], 0
    for i, row in enumerate(rows):
        # get_text: a null or numeric prompt is named with its file, row and key, not a type error later
        text = prompt_text(
            tokenizer,
            get_text(row, cfg.data.input_key, "--input_key", i, cfg.data.dataset),
            cfg.data.apply_chat_template,
            cfg.data.input_template,
        )
        # the same place the csft post-processor put the prefix: before the rendered prompt
        text = csft_prefix(cfg.generate) + text
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > cfg.data.prompt_max_len:
            dropped += 1
            continue
        label = get_field(row, cfg.data.label_key, "--label_key", i, cfg.data.dataset) if cfg.data.label_key else None
        response = (
            get_text(row, cfg.data.output_key, "--output_key", i, cfg.data.dataset)
            if cfg.eval.eval_task == "rm"
            else None
        )
        out.append(PromptRow(text, ids, label, response))
    return kept(out, len(rows), dropped, cfg, log)


def given_samples(rows: list[PromptRow], mine: list[int], eos: str) -> list[Sample]:
    """--eval_task rm: the rows' own responses; the reward's query ends at EOS, as a generated
    response does (and as train_rm trains the RM to read)."""
    return [
        Sample(
            k,
            rows[k].text,
            rows[k].response,
            rows[k].label,
            rows[k].text + (rows[k].response if rows[k].response.endswith(eos) else rows[k].response + eos),
        )
        for k in mine
    ]


def generated_samples(
    cfg: BatchInferenceConfig, rt: Runtime, setup: ModelSetup, rows: list[PromptRow], mine: list[int]
) -> list[Sample]:
    """--best_of_n samples for each of this rank's prompts, from vLLM or the batched HF engine."""
    tok = setup.tokenizer
    if cfg.eval.eval_task == "generate_vllm":
        engine = VLLMEngine(
            setup.path,
            cfg.data.prompt_max_len + cfg.generate.max_new_tokens,
            cfg.train.seed + rt.rank,
            cpu=rt.device == "cpu",
        )
    else:
        model = setup.causal_lm().to(rt.torch_device)
        engine = HFEngine(
            model, tok.eos_token_id, tok.pad_token_id, batch_size=cfg.generate.micro_batch_size, device=rt.torch_device
        )
    rollout = engine.generate(
        [rows[k].ids for k in mine],
        SamplingParams(
            cfg.generate.max_new_tokens,
            cfg.generate.temperature,
            cfg.generate.top_p,
            cfg.generate.best_of_n,
            seed=cfg.train.seed + rt.rank,
        ),
    )
    responses = tok.batch_decode(rollout.response_ids, skip_special_tokens=True)
    as_generated = tok.batch_decode(rollout.response_ids, skip_special_tokens=False)  # EOS kept, like PPO's queries
    samples = [
        Sample(mine[j], rows[mine[j]].text, resp, rows[mine[j]].label, rows[mine[j]].text + raw)
        for j, resp, raw in zip(rollout.prompt_index, responses, as_generated)
    ]
    log.info(
        "generated %d responses (%d prompts x %d) on %d rank(s), %d tokens on rank 0",
        len(samples) * rt.world_size,
        len(rows),
        cfg.generate.best_of_n,
        rt.world_size,
        rollout.response_tokens(),
    )
    return samples


def score(samples: list[Sample], reward: FunctionReward | RewardModels, micro_batch_size: int) -> None:
    for s in range(0, len(samples), micro_batch_size):
        chunk = samples[s : s + micro_batch_size]
        for x, r in zip(
            chunk,
            reward([x.query for x in chunk], [x.prompt for x in chunk], [x.label for x in chunk]).rewards.tolist(),
        ):
            x.reward = r


def write_output(cfg: BatchInferenceConfig, ranked: list[Sample], scored: bool) -> dict:
    """output.jsonl (post-processed if asked) and, when scored, every sample's reward in
    rewards.json (the pipeline's reward histogram), committed to --output_path."""

    out_rows: list[dict] = [{"input": x.prompt, "output": x.response} for x in ranked]
    scores = [x.reward for x in ranked]
    if scored:
        for row, r in zip(out_rows, scores):
            row["reward"] = r
        log.info("scored %d samples: mean reward %.4f", len(scores), sum(scores) / len(scores))
        if cfg.generate.post_processor:
            rated = [Scored(r["input"], r["output"], r["reward"]) for r in out_rows]
            out_rows = POST_PROCESSORS[cfg.generate.post_processor](
                rated, csft_prompt=cfg.generate.csft_prompt, rs_min_reward=cfg.generate.rs_min_reward
            )
            log.info(
                "--post_processor %s: %d rows out of %d samples", cfg.generate.post_processor, len(out_rows), len(rated)
            )

    with StagedOutput(cfg.ckpt.output_path) as out:  # a committed output there stays intact until the commit
        (out.dir / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out_rows))
        final = {"rows": float(len(out_rows))}
        if scored:  # every sample's score, before post-processing
            (out.dir / "rewards.json").write_text(json.dumps(scores))
            final["mean_reward"] = sum(scores) / len(scores)
        out.commit({"stage": "batch_inference", "config": public_dict(cfg), "final_metrics": final})
    log.info("%d rows committed to %s/output.jsonl", len(out_rows), cfg.ckpt.output_path.rstrip("/"))
    return {"rows": len(out_rows)}
