"""python -m alignment.cli.train_dpo: DPO / cDPO (--label_smoothing) / IPO (--ipo) on preference pairs.

The reference is --ref_pretrain, or the policy's initial weights (--pretrain) when not given.
"""
from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.distributed import ray_ranks
from alignment.config import DPOConfig, parse_args

log = logging.getLogger("alignment.train_dpo")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(DPOConfig, argv, prog="alignment.cli.train_dpo")
    check_outputs(cfg)
    if ray_ranks.on_ray(cfg):     # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_dpo")
    from alignment.datasets.preference import PairTokenizer
    from alignment.datasets.tokenized import load_train_eval
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import load_actor, prepare
    from alignment.models.moe import moe_top_k
    from alignment.trainers.base import total_steps
    from alignment.trainers.engine import build_engine
    from alignment.trainers.preference import DPOTrainer
    from alignment.trainers.reference import reference_for

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    cfg.accumulation_steps(rt.world_size)
    setup = prepare(cfg, rt)
    top_k = moe_top_k(setup.path, cfg.aux_loss_coef, setup.trust_remote_code)
    train_set, eval_set = load_train_eval(cfg, lambda src: PairTokenizer(setup.tokenizer, cfg, src))
    steps = total_steps(len(train_set), cfg, rt.world_size)
    kind = "IPO" if cfg.ipo else ("cDPO" if cfg.label_smoothing > 0 else "DPO")
    log.info("%s: %d train pairs, %d eval, %d optimizer steps, beta %g, world size %d, %s", kind, len(train_set),
             len(eval_set or []), steps, cfg.beta, rt.world_size, setup.precision.label)
    ref = reference_for(cfg, setup, rt.device)
    engine = build_engine(load_actor(setup, cfg), cfg, rt, setup.precision.bf16, steps)
    trainer = DPOTrainer(cfg, rt, engine, setup.tokenizer, train_set, eval_set, ref=ref,
                         mask_dtype=setup.packed_mask_dtype, moe_top_k=top_k)
    return trainer.fit()


if __name__ == "__main__":
    run_main(main)
