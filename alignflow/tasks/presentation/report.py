"""The pipeline report: what each stage cost and gave, its curves, and before/after evaluation.

One builder, two renderings: `text()` is what `make demo` prints, `markdown()` is the flow run's
report artifact. Built from the flows' stage summaries (`StageResult.summary()`), so a report can
be rebuilt from a flow's return value. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prefect import get_run_logger
from prefect.artifacts import acreate_markdown_artifact

from alignflow.tasks.presentation import curves
from alignflow.tasks.presentation.artifacts import (
    artifact_key,
    browser_url,
    image_markdown,
    publish_curves,
    read_metrics,
)
from alignflow.tasks.presentation.results import dir_of_model
from alignment import storage
from alignment.lineage import key_metric, walk
from alignment.lineage import lines as lineage_lines


def sparkline(values: list[float], width: int = 60) -> str:
    bars = "▁▂▃▄▅▆▇█"
    picked = values[:: max(1, len(values) // width)]
    lo, hi = min(picked), max(picked)
    return "".join(bars[int((v - lo) / (hi - lo + 1e-12) * (len(bars) - 1))] for v in picked)


@dataclass
class StageLine:
    label: str  # "sft", or "dpo (round 2)"
    stage: str
    wall_s: float  # every try's, summed
    loop_s: float | None  # the training loop inside the job (None: skipped or no loop)
    skipped: bool
    metric: str
    model_uri: str
    heldout: dict | None = None  # {"accuracy", "n", "examples", ...} where the flow evaluates this stage
    tries: int = 1

    def wall(self, skipped: str) -> str:
        if self.skipped:
            return skipped
        return f"{self.wall_s:.0f} s" + (f" ({self.tries} tries)" if self.tries > 1 else "")


@dataclass
class PipelineReport:
    flow: str
    run_name: str
    lines: list[StageLine]
    total_s: float
    rl_rewards: list[float] = field(default_factory=list)  # per RL iteration, when the flow has an RL stage
    rl_kl: float | None = None
    lineage: list[str] = field(default_factory=list)  # the final model's chain back to its base, from its cards
    notes: list[str] = field(default_factory=list)  # what the flow decided and why (a gate, a comparison)
    concurrent: bool = False  # stages ran at the same time (compare): their times overlap, no phases add up

    @property
    def phases(self) -> dict[str, float]:
        ran = [ln for ln in self.lines if not ln.skipped]
        stages = sum(ln.wall_s for ln in ran)
        loops = sum(ln.loop_s or 0.0 for ln in ran)
        return {
            "training loops": loops,
            "stage jobs' start-up, model loading, commits": stages - loops,
            "Prefect + Ray start-up and the rest": self.total_s - stages,
        }

    def total_line(self, sep: str, colon: str) -> str:
        if self.concurrent:
            return f"total {self.total_s:.0f} s (stages ran at the same time: their wall times overlap)"
        return f"total {self.total_s:.0f} s {colon}" + sep.join(f"{v:.0f} s {k}" for k, v in self.phases.items())

    def evaluations(self) -> list[StageLine]:
        return [ln for ln in self.lines if ln.heldout and "accuracy" in ln.heldout]

    def rl_summary(self) -> str | None:
        if not self.rl_rewards:
            return None
        r, k = self.rl_rewards, max(1, len(self.rl_rewards) // 4)
        return (
            f"RL reward (score per sample, {len(r)} iterations): first quarter {sum(r[:k]) / k:.3f} -> "
            f"last quarter {sum(r[-k:]) / k:.3f}"
        )

    def gain(self) -> str | None:
        """The last evaluated model's gain over the first, with its noise band: one standard error of the
        difference of two accuracies on n questions each, sqrt(p1(1-p1)/n + p2(1-p2)/n). A gain inside it is
        not evidence of learning."""
        evals = self.evaluations()
        if len(evals) < 2 or evals[0].heldout["n"] != evals[-1].heldout["n"]:
            return None
        first, last, n = evals[0].heldout["accuracy"], evals[-1].heldout["accuracy"], evals[-1].heldout["n"]
        band = math.sqrt(first * (1 - first) / n + last * (1 - last) / n)
        verdict = "outside" if abs(last - first) > band else "inside"
        return (
            f"gain of {evals[-1].label} over {evals[0].label}: {100 * (last - first):+.1f} points, {verdict} the noise "
            f"band of ±{100 * band:.1f} (one standard error of the difference on {n} questions)"
        )

    def text(self) -> str:
        out = [
            f"\n=== alignflow {self.flow}: run {self.run_name} ===",
            f"{'stage':16s} {'wall':>16s} {'loop':>7s}  {'key metric':40s} output",
        ]
        for ln in self.lines:
            loop = f"{ln.loop_s:.0f} s" if ln.loop_s is not None and not ln.skipped else "-"
            out.append(f"{ln.label:16s} {ln.wall('skipped'):>16s} {loop:>7s}  {ln.metric:40s} {ln.model_uri}")
        out.append(self.total_line(" + ", "= "))
        if self.rl_summary():
            out.append(f"\n{self.rl_summary()}   {sparkline(self.rl_rewards)}")
            out.append(
                f"KL to the SFT policy at the end: {self.rl_kl:.3f}"
                if self.rl_kl is not None
                else "KL to the SFT policy: not measured (no KL term, so no reference model is loaded)"
            )
        evals = self.evaluations()
        if evals:
            out.append(
                f"held-out greedy accuracy ({evals[0].heldout['n']} questions): "
                + ", ".join(f"after {ln.label} {ln.heldout['accuracy']:.1%}" for ln in evals)
            )
            gain = self.gain()
            out += [gain] if gain else []
            for q, resp, label, right in evals[-1].heldout.get("examples", []):
                mark = "ok " if right else "err"
                out.append(f"  [{mark}] {q:<22} -> {resp!r} (answer {label})")
        out += self.notes
        if self.lineage:
            out += [
                "lineage of the final model (python -m alignment.cli.lineage URI):",
                *(f"  {h}" for h in self.lineage),
            ]
        return "\n".join(out)

    def markdown(self, curves_png: dict[str, bytes]) -> str:
        md = [
            f"## {self.flow}: run `{self.run_name}`",
            "",
            "| stage | wall | training loop | key metric | output |",
            "|---|---|---|---|---|",
        ]
        for ln in self.lines:
            loop = f"{ln.loop_s:.0f} s" if ln.loop_s is not None and not ln.skipped else "-"
            url = browser_url(ln.model_uri)
            where = f"[`{ln.model_uri}`]({url})" if url else f"`{ln.model_uri}`"
            md.append(f"| {ln.label} | {ln.wall('skipped (already committed)')} | {loop} | {ln.metric} | {where} |")
        md += ["", self.total_line(", ", ": ").replace("total", "Total", 1) + "."]
        if self.rl_summary():
            md += ["", self.rl_summary() + "."]
        evals = self.evaluations()
        if evals:
            md += ["", "| held-out greedy accuracy | questions |", "|---|---|"]
            md += [f"| after {ln.label}: {ln.heldout['accuracy']:.1%} | {ln.heldout['n']} |" for ln in evals]
            gain = self.gain()
            md += ["", gain.capitalize() + "."] if gain else []
        if self.notes:
            md += ["", *(f"- {note}" for note in self.notes)]
        if self.lineage:
            md += ["", "Lineage of the final model, from its model cards:", "", "```", *self.lineage, "```"]
        for label, png in curves_png.items():
            md += ["", f"### {label}", image_markdown(png, "", label)]
        return "\n".join(md)


def build_report(
    flow: str,
    run_name: str,
    results: dict[str, dict],
    total_s: float,
    notes: list[str] | None = None,
    concurrent: bool = False,
) -> PipelineReport:
    """`results`: label -> a stage summary (`StageResult.summary()`, as the flows return them); `notes`:
    the flow's decisions, one line each."""

    lines = []
    for label, r in results.items():
        stage = r.get("stage", label)
        m = r.get("metrics", {})
        lines.append(
            StageLine(
                label,
                stage,
                r["stage_wall_s"],
                m.get("time/loop_s"),
                r["skipped"],
                key_metric(stage, m),
                r["model_uri"],
                r.get("heldout"),
                r.get("stage_tries", 1),
            )
        )
    report = PipelineReport(flow, run_name, lines, total_s, notes=list(notes or []), concurrent=concurrent)
    rl = [ln for ln in lines if ln.stage == "ppo"]
    if rl:
        rows = [row for row in read_metrics(rl[-1].model_uri) if "train/reward" in row]
        report.rl_rewards = [row["train/reward"] for row in rows]
        report.rl_kl = rows[-1].get("train/kl") if rows else None
    report.lineage = final_lineage(lines)
    return report


def final_lineage(lines: list[StageLine]) -> list[str]:
    """The last model's lineage lines (a few small reads); none where it has no card or a card can't
    be read: the report must not fail over it."""
    models = [ln for ln in lines if ln.stage not in ("batch_inference", "evaluate")]
    try:
        hops = walk(models[-1].model_uri) if models else []
    except (storage.StorageError, ValueError, OSError):  # ValueError: ConfigError (nothing there), bad YAML
        return []
    return lineage_lines(hops) if hops and hops[0].card else []


def stage_curves(report: PipelineReport) -> dict[str, bytes]:
    """Each stage's final curves, as its task saved them next to its output."""
    out = {}
    for ln in report.lines:
        uri = f"{dir_of_model(ln.model_uri)}/curves.png"
        fs, path = storage.filesystem(uri)
        if fs.exists(path):
            with fs.open(path, "rb") as f:
                out[ln.label] = f.read()
    return out


async def publish_report(report: PipelineReport, charts: dict[str, list[curves.Panel]] | None = None) -> None:
    """The flow run's report artifact. `charts`: extra pictures (e.g. an iterative run's rounds),
    each also published as an artifact of its own."""
    pictures = stage_curves(report)
    for name, panels in (charts or {}).items():
        png = await publish_curves(report.run_name, f"{report.flow}-{name}", panels)
        if png is not None:
            pictures[name] = png
    key = artifact_key(report.run_name, report.flow, "report")
    await acreate_markdown_artifact(
        key=key, markdown=report.markdown(pictures), description=f"{report.flow} report of run {report.run_name}"
    )
    get_run_logger().info("%s\n(the flow run's report artifact: %s)", report.text(), key)
