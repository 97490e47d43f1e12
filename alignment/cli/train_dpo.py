"""python -m alignment.cli.train_dpo: DPO / cDPO (--label_smoothing) / IPO (--ipo) on preference pairs.

The reference is --ref_pretrain, or the policy's initial weights (--pretrain) when not given.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import DPOConfig, parse_args

log = logging.getLogger("alignment.train_dpo")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(DPOConfig, argv, prog="alignment.cli.train_dpo")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_dpo")
    from alignment.datasets.preference import PairTokenizer
    from alignment.models.builder import load_actor
    from alignment.trainers.preference import DPOTrainer
    from alignment.trainers.reference import reference_for
    from alignment.trainers.start import start

    s = start(cfg, lambda tok, source: PairTokenizer(tok, cfg, source))
    kind = "IPO" if cfg.model.ipo_enable else ("cDPO" if cfg.model.label_smoothing > 0 else "DPO")
    log.info("%s: %s, beta %g", kind, s.counts("pairs"), cfg.model.beta)
    ref = reference_for(cfg.ref, s.setup, s.rt.device)
    return s.trainer(
        DPOTrainer, cfg, load_actor(s.setup, cfg), ref=ref, mask_dtype=s.setup.packed_mask_dtype, moe_top_k=s.moe_top_k
    ).fit()


if __name__ == "__main__":
    run_main(main)
