"""python -m alignment.cli.train_sft: supervised fine-tuning on DeepSpeed (OpenRLHF's flags).

Also runs under `deepspeed --module alignment.cli.train_sft` and `torchrun --nproc_per_node N -m ...`.
Order matters: flags, data and tokenizer are checked before any weights are loaded.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import SFTConfig, parse_args

log = logging.getLogger("alignment.train_sft")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(SFTConfig, argv, prog="alignment.cli.train_sft")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_sft")
    from alignment.datasets.sft import SFTTokenizer
    from alignment.models.builder import load_actor
    from alignment.trainers.sft import SFTTrainer
    from alignment.trainers.start import start

    s = start(cfg, lambda tok, source: SFTTokenizer(tok, cfg, source))
    log.info("SFT: %s", s.counts())
    return s.trainer(
        SFTTrainer, cfg, load_actor(s.setup, cfg), mask_dtype=s.setup.packed_mask_dtype, moe_top_k=s.moe_top_k
    ).fit()


if __name__ == "__main__":
    run_main(main)
