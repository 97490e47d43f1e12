"""Placement cost: the demo's SFT stage on 2 ranks, `torchrun --nproc_per_node 2` vs the `sft` flow
whose Ray job places the 2 ranks as Ray actors (Prefect ephemeral API -> local Ray head -> Ray
job -> one actor per rank -> the same CLI and config on each rank)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from benchmarks.compare.workloads import DEMO_SFT_CONFIG, Comparison, Context, Sample, Side, sft_flow_sample

# 32 samples per step = 2 ranks x micro-batch 16 (the demo's config has micro-batch 32 for one rank)
TWO_RANKS = {"num_gpus_per_node": 2, "micro_train_batch_size": 16}


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def placement_sides(ctx: Context, base: str, steps: int) -> list[Side]:
    torchrun = str(Path(ctx.python).parent / "torchrun")

    def launcher(tag: str) -> Sample:
        out = ctx.work / "runs" / tag
        shutil.rmtree(out, ignore_errors=True)
        res = ctx.run(
            [
                torchrun,
                "--nproc_per_node",
                "2",
                "--master_port",
                _free_port(),
                "-m",
                "alignment.cli.train_sft",
                "--config",
                str(DEMO_SFT_CONFIG),
                "--pretrain",
                base,
                "--max_steps",
                str(steps),
                "--micro_train_batch_size",
                "16",
                "--save_path",
                f"{out}/model",
                "--ckpt_path",
                f"{out}/checkpoints",
                "--load_checkpoint",
            ],
            tag,
        )
        return Sample(res.wall_s, res.peak_rss_mb, res.wall_s)

    def flow(tag: str) -> Sample:
        return sft_flow_sample(ctx, tag, {"pretrain": base, "max_steps": steps, **TWO_RANKS})

    return [
        Side("torchrun, 2 ranks", launcher),
        Side(
            "flow → Ray ranks, 2 ranks: stage task",
            flow,
            {"flow → Ray ranks, 2 ranks: whole flow command": "whole command"},
        ),
    ]


def placement_comparison(ctx: Context, demo_base: str, steps: int) -> Comparison:
    return Comparison(
        "placement",
        "Placement: 2-rank SFT stage",
        "s (wall)",
        False,
        placement_sides(ctx, demo_base, steps),
        "placement ≤ 5 %",
        1.05,
        f"the demo's SFT stage (deployments/recipes/tiny/sft.yaml, {steps} steps, 2 ranks x micro-batch "
        "16); torchrun: the whole command; through the flow: the stage task (Ray job submitted -> ranks "
        "placed -> model committed), and the whole flow command (plus Prefect's and the Ray head's "
        "start-up)",
        baseline="torchrun, 2 ranks",
    )
