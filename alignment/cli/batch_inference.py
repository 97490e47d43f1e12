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

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import BatchInferenceConfig, parse_args


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(BatchInferenceConfig, argv, prog="alignment.cli.batch_inference")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "batch_inference")
    if cfg.eval.eval_task == "generate_vllm":
        from alignment.rollout.vllm_engine import vllm_missing_reason

        reason = vllm_missing_reason("--eval_task generate_vllm", "--eval_task generate (the HF engine)")
        if reason:
            from alignment.config import ConfigError

            raise ConfigError(reason)
    from alignment.distributed.collectives import gather_to_main
    from alignment.distributed.runtime import init_runtime
    from alignment.inference.batch import generated_samples, given_samples, load_rows, score, write_output
    from alignment.models.builder import prepare
    from alignment.rewards.scorer import make_reward

    rt = init_runtime(-1, cfg.train.num_threads)
    setup = prepare(cfg, rt)
    rows = load_rows(cfg, setup.tokenizer)
    # data parallel: rank r takes prompts r, r+W, ...; every sample keeps its prompt's index for the gather
    mine = list(range(rt.rank, len(rows), rt.world_size))
    reward = (
        make_reward(cfg, setup.tokenizer, setup.precision.dtype, setup.attn, rt.device)
        if cfg.reward.model_name_or_path or cfg.reward.remote_url
        else None
    )
    samples = (
        given_samples(rows, mine, setup.tokenizer.eos_token or "")
        if cfg.eval.eval_task == "rm"
        else generated_samples(cfg, rt, setup, rows, mine)
    )
    if reward is not None:
        score(samples, reward, cfg.generate.micro_batch_size)
    ranked = gather_to_main(samples, key=lambda x: x.index)  # a prompt's best-of-n keep their order
    return write_output(cfg, ranked, scored=reward is not None) if rt.is_main else {}


if __name__ == "__main__":
    run_main(main)
