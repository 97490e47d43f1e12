"""The sides of a comparison: what each side runs and how one run becomes a number; the rounds.
(Which comparisons, at which size: benchmarks/compare/suite.py.)

A Comparison has two or three sides; a round runs every side once, in order, and the rounds
alternate (ours, TRL, ours, TRL, ...) so drift of the machine hits both sides alike.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from benchmarks.compare import ours
from benchmarks.compare.measure import run_measured, tail
from benchmarks.compare.spec import RunSpec, seconds_per_step, throughput

REPO = Path(__file__).resolve().parents[2]
TRL_RUNNER = Path(__file__).resolve().parent / "trl_runner.py"
DEMO_SFT_CONFIG = REPO / "deployments" / "recipes" / "tiny" / "sft.yaml"
FLOW_SCRIPT = """import asyncio, json, sys
from alignflow.flows.sft import sft_flow
result = asyncio.run(sft_flow(run_name=sys.argv[1], store=sys.argv[2], recipe="tiny", sft=json.loads(sys.argv[3])))
print("FLOW_RESULT " + json.dumps({"stage_wall_s": result["stage_wall_s"], "skipped": result["skipped"]}))
"""


class BenchError(RuntimeError):
    """A run failed; the message names its log."""


@dataclass
class Sample:
    value: float  # in the comparison's unit
    peak_rss_mb: float
    wall_s: float  # the whole subprocess, start-up included
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class Side:
    label: str
    run: Callable[[str], Sample]  # tag (unique per run) -> one measurement
    derived: dict[str, str] = field(default_factory=dict)  # another row's label -> the Sample.extra key it reports


@dataclass
class Comparison:
    key: str
    title: str
    unit: str
    higher_is_better: bool
    sides: list[Side]
    goal: str  # as the issue states it
    goal_ratio: float  # ours / baseline must be >= (higher_is_better) or <= this
    settings: str  # one line for the report
    baseline: str = "TRL"  # the side the others are divided by
    skipped: dict[str, str] = field(default_factory=dict)  # side label -> why it was not run
    results: dict[str, list[Sample]] = field(default_factory=dict)


@dataclass
class Context:
    work: Path  # scratch root of this benchmark run
    python: str  # our venv's interpreter
    trl_python: str
    threads: int
    env: dict[str, str]
    tokens_cache: dict[str, list[int]] = field(default_factory=dict)
    trl_versions: dict[str, str] = field(default_factory=dict)  # as the TRL runner reports them
    device: str = "cpu"  # where both sides train: "cpu" | "cuda" (RunSpec.device)
    bf16: bool = False  # RunSpec.bf16

    def run(self, cmd: list[str], tag: str, env: dict | None = None):
        res = run_measured(cmd, {**self.env, **(env or {})}, REPO, self.work / "logs" / f"{tag}.log")
        if res.returncode != 0:
            raise BenchError(
                f"{tag} failed (exit {res.returncode}): {' '.join(cmd[:4])} ...\n"
                f"--- {res.log} (tail) ---\n{tail(res.log)}"
            )
        return res


def base_env(threads: int, work: Path, device: str = "cpu") -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        WANDB_MODE="offline",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
    )
    if device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    else:  # DeepSpeed detects CUDA itself; a DS_ACCELERATOR=cpu left in the environment would hide the GPU
        env.pop("DS_ACCELERATOR", None)
    env.pop("PREFECT_API_URL", None)
    return env


def _fresh(spec: RunSpec, tag: str, ctx: Context) -> RunSpec:
    out = ctx.work / "runs" / tag
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return replace(spec, out_dir=str(out))


def _value(spec: RunSpec, times: list[float], tokens: list[int] | None) -> float:
    if spec.kind in ("rloo", "grpo"):
        return seconds_per_step(times)
    units = tokens if spec.kind == "sft" else [spec.batch] * len(times)
    return throughput(times, units)


def ours_side(ctx: Context, spec: RunSpec, vllm: bool = False, label: str = "ours", overlap: bool = False) -> Side:
    def run(tag: str) -> Sample:
        s = _fresh(spec, tag, ctx)
        # a new private Ray instance, never a cluster found on the machine; short temp dir (socket path limit)
        env = {"RAY_ADDRESS": "local", "RAY_TMPDIR": tempfile.mkdtemp(prefix="afb-ray-", dir="/tmp")} if vllm else None
        try:
            res = ctx.run(ours.command(ctx.python, s, vllm, overlap), tag, env)
        finally:
            if env:
                shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
        times = ours.step_times(s)
        tokens = None
        if spec.kind == "sft":
            key = json.dumps([spec.model, spec.data, spec.steps, spec.batch, spec.micro])
            if key not in ctx.tokens_cache:
                ctx.tokens_cache[key] = ours.sft_tokens_per_step(s)
            tokens = ctx.tokens_cache[key]
        peak = ours.cuda_peak_gib(s) if spec.device == "cuda" else None
        return Sample(
            _value(spec, times, tokens),
            res.peak_rss_mb,
            res.wall_s,
            {"cuda_peak_gib": peak} if peak is not None else {},
        )

    return Side(label, run)


def trl_side(ctx: Context, spec: RunSpec) -> Side:
    def run(tag: str) -> Sample:
        s = _fresh(spec, tag, ctx)
        spec_path = s.save(Path(s.out_dir) / "spec.json")
        result_path = Path(s.out_dir) / "result.json"
        res = ctx.run([ctx.trl_python, str(TRL_RUNNER), str(spec_path), str(result_path)], tag)
        out = json.loads(result_path.read_text())
        ctx.trl_versions.update(out["versions"])
        peak = out.get("cuda_peak_gib")
        return Sample(
            _value(spec, out["step_times"], out["tokens_per_step"]),
            res.peak_rss_mb,
            res.wall_s,
            {"cuda_peak_gib": peak} if peak is not None else {},
        )

    return Side("TRL", run)


def sft_flow_sample(ctx: Context, tag: str, sft: dict) -> Sample:
    """One run of the `sft` flow on its own Prefect API and Ray head: the stage task's wall time, and
    the whole command's (as the "whole command" extra)."""
    store = ctx.work / "runs" / tag
    shutil.rmtree(store, ignore_errors=True)
    prefect_env = {
        "PREFECT_HOME": str(ctx.work / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    res = ctx.run([ctx.python, "-c", FLOW_SCRIPT, tag.replace("_", "-"), str(store), json.dumps(sft)], tag, prefect_env)
    line = [x for x in res.log.read_text().splitlines() if x.startswith("FLOW_RESULT ")]
    result = json.loads(line[-1].split(" ", 1)[1]) if line else {"skipped": True}
    if result["skipped"]:
        raise BenchError(f"{tag}: the flow did not train the stage; see {res.log}")
    return Sample(result["stage_wall_s"], res.peak_rss_mb, res.wall_s, {"whole command": res.wall_s})


def orchestration_sides(ctx: Context, base: str, steps: int) -> list[Side]:
    """The demo's SFT stage (deployments/recipes/tiny/sft.yaml) as the bare CLI, and through the
    `sft` flow: Prefect (ephemeral API) -> local Ray head -> Ray job running the same CLI and config.
    Two figures per flow run: the stage task's wall time (Ray job submitted -> job done -> model
    committed: what every stage of a pipeline pays), and the whole flow command (plus the Prefect
    API's and the Ray head's start-up and shutdown, paid once per flow run)."""

    def cli(tag: str) -> Sample:
        out = ctx.work / "runs" / tag
        shutil.rmtree(out, ignore_errors=True)
        res = ctx.run(
            [
                ctx.python,
                "-m",
                "alignment.cli.train_sft",
                "--config",
                str(DEMO_SFT_CONFIG),
                "--pretrain",
                base,
                "--max_steps",
                str(steps),
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
        return sft_flow_sample(ctx, tag, {"pretrain": base, "max_steps": steps})

    return [
        Side("bare CLI", cli),
        Side("Prefect → Ray job: stage task", flow, {"Prefect → Ray job: whole flow command": "whole command"}),
    ]


def run_rounds(comps: list[Comparison], pairs: int, warmup: int, log: Callable[[str], None] = print) -> None:
    """Per comparison: `warmup` unrecorded rounds, then `pairs` recorded ones (every side once per round)."""
    for comp in comps:
        comp.results = {label: [] for side in comp.sides for label in (side.label, *side.derived)}
        for r in range(warmup + pairs):
            for side in comp.sides:
                tag = f"{comp.key}_{'warmup' if r < warmup else 'r'}{r}_{side.label.split()[0].lower()}"
                if side.label.startswith("ours ("):
                    tag += "_" + side.label.split("(")[1].split()[0].lower()
                sample = side.run(tag)
                log(
                    f"[bench] {comp.key} round {r + 1}/{warmup + pairs}{' (warm-up)' if r < warmup else ''} "
                    f"{side.label}: {sample.value:.4g} {comp.unit}, peak RSS {sample.peak_rss_mb:.0f} MB, "
                    f"wall {sample.wall_s:.1f} s"
                )
                if r >= warmup:
                    comp.results[side.label].append(sample)
                    for label, key in side.derived.items():
                        comp.results[label].append(Sample(sample.extra[key], sample.peak_rss_mb, sample.wall_s))
        sys.stdout.flush()
