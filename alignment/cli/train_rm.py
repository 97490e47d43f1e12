"""python -m alignment.cli.train_rm: a reward model (LM backbone + scalar head) on preference pairs.

The saved directory loads with `AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)`;
its config.json carries the rewards' mean/std (for PPO's --normalize_reward) and --value_head_prefix.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import RMConfig, parse_args

log = logging.getLogger("alignment.train_rm")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(RMConfig, argv, prog="alignment.cli.train_rm")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_rm")
    from alignment.datasets.preference import PairTokenizer
    from alignment.models.builder import load_value_model
    from alignment.trainers.preference import RewardModelTrainer
    from alignment.trainers.start import start

    s = start(
        cfg,
        lambda tok, source: PairTokenizer(tok, cfg, source, end_at_eos=True, use_margin=cfg.model.margin_loss_enable),
    )
    log.info("RM: %s, loss=%s", s.counts("pairs"), cfg.model.loss_type)
    return s.trainer(
        RewardModelTrainer,
        cfg,
        load_value_model(s.setup, cfg),
        mask_dtype=s.setup.packed_mask_dtype,
        moe_top_k=s.moe_top_k,
    ).fit()


if __name__ == "__main__":
    run_main(main)
