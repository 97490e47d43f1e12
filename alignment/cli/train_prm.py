"""python -m alignment.cli.train_prm: a process reward model (OpenRLHF's flags) — a causal LM taught
to answer the --placeholder_token that ends each reasoning step with one of --reward_tokens.

Order matters: flags, the placeholder and reward tokens against the tokenizer, and the data are
checked before any weights are loaded.
"""

from __future__ import annotations

import logging

from alignment.cli.common import run_main
from alignment.cli.preflight import check_outputs
from alignment.config import PRMConfig, parse_args

log = logging.getLogger("alignment.train_prm")


def main(argv: list[str] | None = None) -> dict:
    cfg = parse_args(PRMConfig, argv, prog="alignment.cli.train_prm")
    check_outputs(cfg)
    from alignment.distributed import ray_ranks  # the flags are checked: what runs loads from here

    if ray_ranks.on_ray(cfg):  # a Ray job, or more than one rank: place the ranks on Ray
        return ray_ranks.run_ranks(main, argv, cfg, "train_prm")
    from alignment.datasets.process_reward import PRMTokenizer
    from alignment.datasets.sources import DataError
    from alignment.models.builder import load_actor
    from alignment.trainers.prm import PRMTrainer
    from alignment.trainers.start import start

    made: list[PRMTokenizer] = []  # the train (and eval) sets' tokenizers: they say hard or soft labels

    def tokenizer_for(tok, source: str) -> PRMTokenizer:
        made.append(PRMTokenizer(tok, cfg, source))
        return made[-1]

    s = start(cfg, tokenizer_for)
    soft = made[0].soft
    if any(t.soft != soft for t in made):
        raise DataError("--dataset and --eval_dataset hold different label kinds (reward tokens / numbers)")
    log.info(
        "PRM: %s, %s labels, placeholder %r, reward tokens %s",
        s.counts(),
        "soft" if soft else "hard",
        cfg.data.placeholder_token,
        cfg.data.reward_tokens or "(the whole vocabulary)",
    )
    return s.trainer(
        PRMTrainer,
        cfg,
        load_actor(s.setup, cfg),
        reward_ids=made[0].reward_ids,
        soft=soft,
        mask_dtype=s.setup.packed_mask_dtype,
        moe_top_k=s.moe_top_k,
    ).fit()


if __name__ == "__main__":
    run_main(main)
