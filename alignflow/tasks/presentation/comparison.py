"""The comparison a `compare` flow ends with: one table artifact (each variant's settings, evaluation, wall
time and model) and one markdown artifact with the metric as bars beside the variants' training curves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from alignflow.tasks.presentation import curves
from alignflow.tasks.presentation.artifacts import artifact_key, image_markdown, read_metrics
from alignflow.tasks.presentation.results import StageResult
from alignment.config import ConfigError
from alignment.config.evaluate import HIGHER_IS_BETTER

LOSS_KEYS = ("train/loss", "train/reward", "eval/loss")  # the first a variant's metrics have is drawn


@dataclass
class Entry:
    name: str
    settings: dict[str, Any]
    result: StageResult  # the variant's trained stage
    evaluation: dict  # tasks.evaluate.read_evaluation of its model


def winner(entries: list[Entry], metric: str) -> Entry:
    """The best variant on `metric`; on a tie the first named."""
    if any(metric not in e.evaluation["metrics"] for e in entries):
        raise ConfigError(
            f"compare: metric {metric!r} is not what the recipe's evaluate stage commits "
            f"({', '.join(k for k in entries[0].evaluation['metrics'] if k != 'rows')}); pick one of those"
        )
    value = (
        (lambda e: e.evaluation["metrics"][metric])
        if HIGHER_IS_BETTER[metric]
        else (lambda e: -e.evaluation["metrics"][metric])
    )
    return max(entries, key=value)


def table(entries: list[Entry], metric: str) -> list[dict]:
    return [
        {
            "variant": e.name,
            metric: round(e.evaluation["metrics"][metric], 4),
            **{k: round(v, 4) for k, v in e.evaluation["metrics"].items() if k not in (metric, "rows")},
            "settings": ", ".join(f"{k}={v}" for k, v in e.settings.items()),
            "wall_s": round(e.result.wall_s, 1),
            "skipped": e.result.skipped,
            "model_uri": e.result.model_uri,
        }
        for e in entries
    ]


def panels(entries: list[Entry], metric: str) -> list[curves.Panel]:
    bars = curves.Panel(
        f"held-out {metric}",
        {e.name: [(0.0, e.evaluation["metrics"][metric])] for e in entries},
        xlabel="variant",
        ylabel=metric,
        kind="bar",
    )
    lines = {}
    for e in entries:
        rows = read_metrics(e.result.model_uri)
        key = next((k for k in LOSS_KEYS if any(k in r for r in rows)), None)
        if key:
            lines[f"{e.name} ({key})"] = [(float(r["step"]), float(r[key])) for r in rows if key in r]
    return [bars] + ([curves.Panel("training curves", lines, ylabel="")] if lines else [])


async def publish_comparison(run_name: str, stage: str, metric: str, entries: list[Entry]) -> None:
    rows = table(entries, metric)
    await acreate_table_artifact(
        key=artifact_key(run_name, "comparison"),
        table=rows,
        description=f"compare · {run_name}: {len(rows)} variants of {stage} on held-out {metric}",
    )
    png = curves.render(panels(entries, metric), f"{run_name}: {stage} variants")
    md = [
        f"## compare · `{run_name}`: {stage} variants on held-out {metric}",
        "",
        f"| variant | {metric} | wall | settings |",
        "|---|---|---|---|",
    ]
    md += [
        f"| {r['variant']} | {r[metric]:.4g} | {r['wall_s']:.0f} s{' (cached)' if r['skipped'] else ''} | "
        f"{r['settings']} |"
        for r in rows
    ]
    if png:
        md += ["", image_markdown(png, "", "comparison")]
    await acreate_markdown_artifact(
        key=artifact_key(run_name, "comparison", "chart"),
        markdown="\n".join(md),
        description=f"compare · {run_name}: table and chart",
    )
