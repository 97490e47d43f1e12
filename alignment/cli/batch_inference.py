"""python -m alignment.cli.batch_inference: generate best-of-n responses and/or score them with
reward models or a reward function, optionally post-process (rs / iter_dpo / csft) — OpenRLHF's
batch_inference, writing `output.jsonl` with a MANIFEST to a directory of the store.

    --eval_task generate       sample --best_of_n responses per --dataset prompt (HF engine);
                               scored too when a reward source is given
    --eval_task generate_vllm  the same with a vLLM engine
    --eval_task rm             score existing (--input_key, --output_key) rows

Rows out: {"input", "output"[, "reward"]} per sample, or what the post-processor makes
(`alignment.inference.postprocess`). Bad data and flags fail before any model loads.
"""
from __future__ import annotations

import json
import logging
import shutil

from alignment.cli.common import run_main
from alignment.distributed import ray_ranks
from alignment.cli.preflight import check_outputs
from alignment.config import BatchInferenceConfig, parse_args
from alignment.config.base import public_dict

log = logging.getLogger("alignment.batch_inference")


def this_round(rows: list[dict], cfg: BatchInferenceConfig) -> list[dict]:
    """--rollout_batch_size N --iter k: rows [k*N, (k+1)*N), so each round of an iterative
    pipeline samples prompts the earlier rounds did not; past the end it wraps around, so a
    schedule that runs every night keeps going (a second pass sees the prompts again)."""
    if not cfg.rollout_batch_size or not rows:
        return rows
    start = cfg.iter * cfg.rollout_batch_size
    return [rows[(start + j) % len(rows)] for j in range(min(cfg.rollout_batch_size, len(rows)))]


def load_rows(cfg: BatchInferenceConfig, tokenizer) -> list[tuple[str, list[int], object, str | None]]:
    """(prompt text, prompt ids, label, response or None) per row; over-long prompts dropped and counted."""
    from alignment.datasets.formatting import get_field, prompt_text, require_chat_template
    from alignment.datasets.mixing import blend
    from alignment.datasets.sources import DataError
    if cfg.apply_chat_template:
        require_chat_template(tokenizer, "--pretrain")
    rows = this_round(blend(cfg.dataset, cfg.dataset_probs, cfg.dataset_split, cfg.max_samples, cfg.seed), cfg)
    out, dropped = [], 0
    for i, row in enumerate(rows):
        text = prompt_text(tokenizer, get_field(row, cfg.input_key, "--input_key", i, cfg.dataset),
                           cfg.apply_chat_template, cfg.input_template)
        if cfg.enable_csft:      # the same place the csft post-processor put the prefix: before the rendered prompt
            text = cfg.csft_prompt.format(reward=cfg.csft_reward) + text
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > cfg.prompt_max_len:
            dropped += 1
            continue
        label = get_field(row, cfg.label_key, "--label_key", i, cfg.dataset) if cfg.label_key else None
        response = get_field(row, cfg.output_key, "--output_key", i, cfg.dataset) if cfg.eval_task == "rm" else None
        out.append((text, ids, label, response))
    if dropped:
        log.warning("dropped %d of %d prompts longer than --prompt_max_len %d tokens", dropped, len(rows),
                    cfg.prompt_max_len)
    if not out:
        raise DataError(f"{cfg.dataset}: no usable rows ({len(rows)} read, {dropped} over --prompt_max_len "
                        f"{cfg.prompt_max_len}); check --dataset/--dataset_split or raise --prompt_max_len")
    return out


def gather_to_main(samples: list[tuple], world_size: int) -> list[tuple]:
    """Every rank's (prompt index, ...) samples on rank 0, in prompt order (stable: a prompt's
    best-of-n samples keep their order); other ranks get []."""
    if world_size == 1:
        return samples
    import torch.distributed as dist
    parts: list[list[tuple]] | None = [[] for _ in range(world_size)] if dist.get_rank() == 0 else None
    dist.gather_object(samples, parts, dst=0)
    return sorted((x for part in parts for x in part), key=lambda x: x[0]) if parts is not None else []


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(BatchInferenceConfig, argv, prog="alignment.cli.batch_inference")
    check_outputs(cfg)
    if ray_ranks.on_ray(cfg):     # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "batch_inference")
    if cfg.eval_task == "generate_vllm":
        from alignment.rollout.vllm_engine import vllm_missing_reason
        reason = vllm_missing_reason("--eval_task generate_vllm", "--eval_task generate (the HF engine)")
        if reason:
            from alignment.config import ConfigError
            raise ConfigError(reason)
    from alignment import outputs
    from alignment.inference.postprocess import POST_PROCESSORS, Scored
    from alignment.models.builder import prepare
    from alignment.models.loading import load_causal_lm
    from alignment.rewards.scorer import make_reward
    from alignment.rollout.types import SamplingParams
    from alignment.distributed.runtime import init_runtime

    rt = init_runtime(-1, cfg.num_threads)
    setup = prepare(cfg, rt)
    tok = setup.tokenizer
    rows = load_rows(cfg, tok)
    # data parallel: rank r takes prompts r, r+W, ...; every sample keeps its prompt's index for the gather
    mine = list(range(rt.rank, len(rows), rt.world_size))
    reward = (make_reward(cfg, tok, setup.precision.dtype, setup.attn, rt.device)
              if cfg.reward_pretrain or cfg.remote_rm_url else None)

    eos = tok.eos_token or ""
    if cfg.eval_task == "rm":
        # the reward's query ends at EOS, as a generated response does (and as train_rm trains the RM to read)
        samples = [(k, rows[k][0], rows[k][3], rows[k][2],
                    rows[k][0] + (rows[k][3] if rows[k][3].endswith(eos) else rows[k][3] + eos)) for k in mine]
    else:
        if cfg.eval_task == "generate_vllm":
            from alignment.rollout.vllm_engine import VLLMEngine
            engine = VLLMEngine(setup.path, cfg.prompt_max_len + cfg.max_new_tokens, cfg.seed + rt.rank,
                                cpu=rt.device == "cpu")
        else:
            from alignment.rollout.hf_engine import HFEngine
            model = load_causal_lm(setup.path, setup.precision.dtype, setup.attn,
                           trust_remote_code=setup.trust_remote_code).to(rt.torch_device)
            engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id, batch_size=cfg.micro_batch_size,
                              device=rt.torch_device)
        rollout = engine.generate([rows[k][1] for k in mine], SamplingParams(
            cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.best_of_n, seed=cfg.seed + rt.rank))
        responses = tok.batch_decode(rollout.response_ids, skip_special_tokens=True)
        as_generated = tok.batch_decode(rollout.response_ids, skip_special_tokens=False)   # EOS kept, like PPO's queries
        samples = [(mine[j], rows[mine[j]][0], resp, rows[mine[j]][2], rows[mine[j]][0] + raw)
                   for j, resp, raw in zip(rollout.prompt_index, responses, as_generated)]
        log.info("generated %d responses (%d prompts x %d) on %d rank(s), %d tokens on rank 0", len(samples) *
                 rt.world_size, len(rows), cfg.best_of_n, rt.world_size, rollout.response_tokens())

    scores: list[float] | None = None
    if reward is not None:
        scores = []
        for s in range(0, len(samples), cfg.micro_batch_size):
            chunk = samples[s:s + cfg.micro_batch_size]
            scores += reward([x[4] for x in chunk], [x[1] for x in chunk], [x[3] for x in chunk]).tolist()
    ranked = gather_to_main([(x[0], x[1], x[2], None if scores is None else scores[i]) for i, x in enumerate(samples)],
                            rt.world_size)
    if not rt.is_main:
        return {}
    out_rows: list[dict] = [{"input": p, "output": r} for _, p, r, _ in ranked]
    if reward is not None:
        scores = [score for *_, score in ranked]
        for row, score in zip(out_rows, scores):
            row["reward"] = score
        log.info("scored %d samples: mean reward %.4f", len(scores), sum(scores) / len(scores))
        if cfg.post_processor:
            scored = [Scored(r["input"], r["output"], r["reward"]) for r in out_rows]
            out_rows = POST_PROCESSORS[cfg.post_processor](scored, csft_prompt=cfg.csft_prompt,
                                                                 rs_min_reward=cfg.rs_min_reward)
            log.info("--post_processor %s: %d rows out of %d samples", cfg.post_processor, len(out_rows), len(scored))

    local = outputs.staging_dir(cfg.output_path)   # a committed output there stays intact until the commit
    try:
        (local / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out_rows))
        if reward is not None:   # every sample's score, before post-processing: the pipeline's reward histogram
            (local / "rewards.json").write_text(json.dumps(scores))
        final = {"rows": float(len(out_rows))}
        if reward is not None:
            final["mean_reward"] = sum(scores) / len(scores)     # over every sample, before post-processing
        outputs.commit_output(local, cfg.output_path, metadata={
            "stage": "batch_inference", "config": public_dict(cfg), "final_metrics": final})
    finally:
        shutil.rmtree(local, ignore_errors=True)
    log.info("%d rows committed to %s/output.jsonl", len(out_rows), cfg.output_path.rstrip("/"))
    return {"rows": len(out_rows)}


if __name__ == "__main__":
    run_main(main)
