"""python -m alignment.cli.evaluate: one held-out measurement of one committed model, committed to
--output_path as evaluation.json with a MANIFEST (its metrics are the manifest's final_metrics).

    --eval_task generate     greedy responses to --dataset prompts, scored by --remote_rm_url (a reward_func
                             file or server, with --label_key: accuracy, mean_reward), --reward_pretrain
                             (an RM: mean_reward), or with neither matched against --label_key (accuracy)
    --eval_task pairs        --pretrain is a reward model: pair_accuracy and mean_margin on (chosen, rejected)
    --eval_task perplexity   --pretrain's perplexity on the --output_key responses given their prompts

The flows run it as their `evaluate` stage (gated promotion, comparisons, before/after figures);
--num_nodes x --num_gpus_per_node ranks split the rows between them on Ray.
"""

from __future__ import annotations

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import parse_args
from alignment.config.evaluate import EvaluateConfig


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(EvaluateConfig, argv, prog="alignment.cli.evaluate")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "evaluate")
    from alignment.distributed.collectives import gather_to_main
    from alignment.distributed.runtime import init_runtime
    from alignment.inference.eval_rows import load_eval_rows
    from alignment.inference.evaluate import generate_values, pair_values, perplexity_values, write_evaluation
    from alignment.models.builder import prepare
    from alignment.rewards.scorer import make_reward

    rt = init_runtime(-1, cfg.train.num_threads)
    setup = prepare(cfg, rt)
    rows = load_eval_rows(cfg, setup.tokenizer)
    mine = rows[rt.rank :: rt.world_size]
    if cfg.eval.eval_task == "generate":
        reward = (
            make_reward(cfg, setup.tokenizer, setup.precision.dtype, setup.attn, rt.device)
            if cfg.has_reward()
            else None
        )
        values = generate_values(cfg, setup, rt, mine, reward)
    elif cfg.eval.eval_task == "pairs":
        values = pair_values(cfg.generate, setup, rt, mine)
    else:
        values = perplexity_values(cfg.data, setup, rt, mine)
    everything = gather_to_main(values, key=lambda v: v.index)
    return write_evaluation(cfg, everything, scored_by_rm=bool(cfg.reward.model_name_or_path)) if rt.is_main else {}


if __name__ == "__main__":
    run_main(main)
