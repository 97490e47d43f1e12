"""python -m alignment.cli.train_rm: a reward model (LM backbone + scalar head) on preference pairs.

The saved directory loads with `AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)`;
its config.json carries the rewards' mean/std (for PPO's --normalize_reward) and --value_head_prefix.
"""
from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.distributed import ray_ranks
from alignment.config import RMConfig, parse_args

log = logging.getLogger("alignment.train_rm")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(RMConfig, argv, prog="alignment.cli.train_rm")
    check_outputs(cfg)
    if ray_ranks.on_ray(cfg):     # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_rm")
    from alignment.datasets.preference import PairTokenizer
    from alignment.datasets.tokenized import load_train_eval
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import load_value_model, prepare
    from alignment.trainers.base import total_steps
    from alignment.trainers.engine import build_engine
    from alignment.trainers.preference import RewardModelTrainer

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    cfg.accumulation_steps(rt.world_size)
    setup = prepare(cfg, rt)
    train_set, eval_set = load_train_eval(
        cfg, lambda src: PairTokenizer(setup.tokenizer, cfg, src, end_at_eos=True, use_margin=cfg.margin_loss))
    steps = total_steps(len(train_set), cfg, rt.world_size)
    log.info("RM: %d train pairs, %d eval, %d optimizer steps, world size %d, %s, attention=%s, loss=%s",
             len(train_set), len(eval_set or []), steps, rt.world_size, setup.precision.label, setup.attn, cfg.loss)
    model = load_value_model(setup, cfg)
    engine = build_engine(model, cfg, rt, setup.precision.bf16, steps)
    trainer = RewardModelTrainer(cfg, rt, engine, setup.tokenizer, train_set, eval_set,
                                 mask_dtype=setup.packed_mask_dtype)
    return trainer.fit()


if __name__ == "__main__":
    run_main(main)
