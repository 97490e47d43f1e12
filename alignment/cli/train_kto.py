"""python -m alignment.cli.train_kto: KTO on unpaired responses labelled desirable (true) or not (false)."""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import KTOConfig, parse_args

log = logging.getLogger("alignment.train_kto")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(KTOConfig, argv, prog="alignment.cli.train_kto")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_kto")
    from alignment.datasets.unpaired import UnpairedTokenizer
    from alignment.models.builder import load_actor
    from alignment.trainers.preference import KTOTrainer
    from alignment.trainers.reference import reference_for
    from alignment.trainers.start import start

    s = start(cfg, lambda tok, source: UnpairedTokenizer(tok, cfg, source))
    good = sum(x.desirable for x in s.train_set)
    log.info(
        "KTO: %s (%d desirable, %d undesirable), beta %g", s.counts(), good, len(s.train_set) - good, cfg.model.beta
    )
    ref = reference_for(cfg.ref, s.setup, s.rt.device)
    return s.trainer(KTOTrainer, cfg, load_actor(s.setup, cfg), ref=ref, mask_dtype=s.setup.packed_mask_dtype).fit()


if __name__ == "__main__":
    run_main(main)
