"""python -m alignment.cli.train_kto: KTO on unpaired responses labelled desirable (true) or not (false)."""
from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.distributed import ray_ranks
from alignment.config import KTOConfig, parse_args

log = logging.getLogger("alignment.train_kto")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(KTOConfig, argv, prog="alignment.cli.train_kto")
    check_outputs(cfg)
    if ray_ranks.on_ray(cfg):     # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_kto")
    from alignment.datasets.preference import UnpairedTokenizer
    from alignment.datasets.tokenized import load_train_eval
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import load_actor, prepare
    from alignment.trainers.base import total_steps
    from alignment.trainers.engine import build_engine
    from alignment.trainers.preference import KTOTrainer
    from alignment.trainers.reference import reference_for

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    cfg.accumulation_steps(rt.world_size)
    setup = prepare(cfg, rt)
    train_set, eval_set = load_train_eval(cfg, lambda src: UnpairedTokenizer(setup.tokenizer, cfg, src))
    steps = total_steps(len(train_set), cfg, rt.world_size)
    good = sum(s.desirable for s in train_set)
    log.info("KTO: %d train samples (%d desirable, %d undesirable), %d eval, %d optimizer steps, beta %g, "
             "world size %d, %s", len(train_set), good, len(train_set) - good, len(eval_set or []), steps, cfg.beta,
             rt.world_size, setup.precision.label)
    ref = reference_for(cfg, setup, rt.device)
    engine = build_engine(load_actor(setup, cfg), cfg, rt, setup.precision.bf16, steps)
    trainer = KTOTrainer(cfg, rt, engine, setup.tokenizer, train_set, eval_set, ref=ref,
                         mask_dtype=setup.packed_mask_dtype)
    return trainer.fit()


if __name__ == "__main__":
    run_main(main)
