"""python -m alignment.cli.train_opd: on-policy distillation (OpenRLHF's flags) — the student answers the
prompts of --dataset (OpenRLHF: --data.prompt_dataset) itself and learns to lower its reverse KL to a frozen
--teacher_model on its own responses.

Order matters: flags, the teacher's vocabulary against the student's, prompts and tokenizer are checked
before any weights are loaded.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.cli.teacher import teacher_side
from alignment.config import OPDConfig, parse_args

log = logging.getLogger("alignment.train_opd")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(OPDConfig, argv, prog="alignment.cli.train_opd")
    check_outputs(cfg)
    side = teacher_side(cfg)  # --teacher_num_nodes: the teacher on its own Ray group
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg, side):  # a Ray job, more than one rank or a teacher group: place them on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_opd", side)
    from alignment.datasets.prompts import PromptTokenizer
    from alignment.models.builder import load_actor
    from alignment.trainers.kd import check_teacher, teacher_for
    from alignment.trainers.opd import OPDTrainer
    from alignment.trainers.start import start

    teacher_path = check_teacher(cfg)
    s = start(cfg, lambda tok, source: PromptTokenizer(tok, cfg, source))
    mode = f"top-{cfg.opd.topk} reverse KL" if cfg.opd.topk else f"sampled-token reverse KL ({cfg.opd.kl_estimator})"
    log.info("OPD: %s, %s", s.counts("prompts"), mode)
    teacher = teacher_for(cfg.teacher, teacher_path, s.setup, s.rt.device)
    return s.trainer(OPDTrainer, cfg, load_actor(s.setup, cfg), teacher=teacher, moe_top_k=s.moe_top_k).fit()


if __name__ == "__main__":
    run_main(main)
