"""python -m alignment.cli.train_kd: knowledge distillation (OpenRLHF's flags) — SFT plus a frozen
--teacher_model's next-token distributions on the response tokens, weighted by --kd_coef.

Order matters: flags, the teacher's vocabulary against the student's, data and tokenizer are checked
before any weights are loaded.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.cli.teacher import teacher_side
from alignment.config import KDConfig, parse_args

log = logging.getLogger("alignment.train_kd")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(KDConfig, argv, prog="alignment.cli.train_kd")
    check_outputs(cfg)
    side = teacher_side(cfg)  # --teacher_num_nodes: the teacher on its own Ray group
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg, side):  # a Ray job, more than one rank or a teacher group: place them on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_kd", side)
    from alignment.datasets.sft import SFTTokenizer
    from alignment.models.builder import load_actor
    from alignment.trainers.kd import KDTrainer, check_teacher, teacher_for
    from alignment.trainers.start import start

    teacher_path = check_teacher(cfg)
    s = start(cfg, lambda tok, source: SFTTokenizer(tok, cfg, source))
    log.info("KD: %s, kd_coef %g", s.counts(), cfg.kd.kd_coef)
    teacher = teacher_for(cfg.teacher, teacher_path, s.setup, s.rt.device)
    return s.trainer(
        KDTrainer,
        cfg,
        load_actor(s.setup, cfg),
        teacher=teacher,
        mask_dtype=s.setup.packed_mask_dtype,
        moe_top_k=s.moe_top_k,
    ).fit()


if __name__ == "__main__":
    run_main(main)
