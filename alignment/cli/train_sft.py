"""python -m alignment.cli.train_sft: supervised fine-tuning on DeepSpeed (OpenRLHF's flags).

Also runs under `deepspeed --module alignment.cli.train_sft` and `torchrun --nproc_per_node N -m ...`.
Order matters: flags, data and tokenizer are checked before any weights are loaded.
"""
from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.distributed import ray_ranks
from alignment.config import SFTConfig, parse_args

log = logging.getLogger("alignment.train_sft")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(SFTConfig, argv, prog="alignment.cli.train_sft")
    check_outputs(cfg)
    if ray_ranks.on_ray(cfg):     # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_sft")
    from alignment.datasets.sft import SFTTokenizer
    from alignment.datasets.tokenized import load_train_eval
    from alignment.distributed.runtime import init_runtime
    from alignment.models.builder import load_actor, prepare
    from alignment.models.moe import moe_top_k
    from alignment.trainers.base import total_steps
    from alignment.trainers.engine import build_engine
    from alignment.trainers.sft import SFTTrainer

    rt = init_runtime(cfg.local_rank, cfg.num_threads)
    cfg.accumulation_steps(rt.world_size)  # fails now, not after loading, if sizes don't divide
    setup = prepare(cfg, rt)
    top_k = moe_top_k(setup.path, cfg.aux_loss_coef, setup.trust_remote_code)
    train_set, eval_set = load_train_eval(cfg, lambda src: SFTTokenizer(setup.tokenizer, cfg, src))
    steps = total_steps(len(train_set), cfg, rt.world_size)
    log.info("SFT: %d train samples, %d eval, %d optimizer steps, world size %d, %s, attention=%s",
             len(train_set), len(eval_set or []), steps, rt.world_size, setup.precision.label, setup.attn)
    model = load_actor(setup, cfg)
    engine = build_engine(model, cfg, rt, setup.precision.bf16, steps)
    trainer = SFTTrainer(cfg, rt, engine, setup.tokenizer, train_set, eval_set, mask_dtype=setup.packed_mask_dtype,
                          moe_top_k=top_k)
    return trainer.fit()


if __name__ == "__main__":
    run_main(main)
