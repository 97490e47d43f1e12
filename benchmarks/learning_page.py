"""benchmarks/learning.py's page: the table of every method's held-out accuracy, each row's run, the chart,
and the hand-kept notes under them."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path


def cpu_model() -> str:
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "unknown CPU")


def markdown(summary: dict, chart: str | None, notes: str = "", stale: frozenset[str] = frozenset()) -> str:
    """The page: the measured table and chart, each row's run (methods may be measured one invocation at a
    time), then `notes` (what moved the numbers: kept by hand, since a recipe's history is not in these figures).
    `stale`: rows measured before a recipe file of theirs changed; marked, until a run of theirs replaces them."""
    sft = summary["sft_accuracy"]
    runs: dict[str, list[str]] = {}
    for m, row in summary["methods"].items():
        runs.setdefault(row["measured"]["how"], []).append(m)
    recipe = summary.get("recipe", "tiny")
    lines = [
        "# Learning: what each method adds to held-out accuracy"
        + ("" if recipe == "tiny" else f" (the {recipe} recipe)"),
        "",
        *(f"- {', '.join(ms)}: {how}." for how, ms in runs.items()),
        "",
        f"Every method starts from the same SFT model (held-out greedy accuracy **{100 * sft:.1f} %**) and is",
        "measured by the recipe's `evaluate` stage on the same held-out questions. Spread: the standard deviation",
        "over seeds (none shown for a row of one seed). Wall time: the training stage alone, mean over seeds.",
        "",
        "| method | reward | held-out accuracy | gain over SFT | seeds | wall time | measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, row in summary["methods"].items():
        # one seed has no spread to show: "± 0.0" would claim a measured one
        spread = f" ± {100 * row['spread']:.1f}" if len(row["runs"]) > 1 else ""
        lines.append(
            f"| {m}{' †' if m in stale else ''} | {row['reward']} | {100 * row['mean']:.1f}{spread} % | "
            f"{100 * row['gain']:+.1f} | {len(row['runs'])} | {row['wall_s']:.0f} s | {row['measured']['date']} |"
        )
    if stale:
        lines += [
            "",
            "† measured before a recipe file its stages read changed (the notes say what changed): the figure is "
            "the earlier recipe's, and the next run of the method replaces the row.",
        ]
    for m, row in summary["methods"].items():  # conditional SFT: how much the asked-for score steers
        for run in row["runs"]:
            if "steered" in run:
                asked = ", ".join(
                    f"{100 * acc:.1f} % " + ("with no prefix" if r == "none" else f"asking for {r}")
                    for r, acc in run["steered"].items()
                )
                lines += ["", f"{m}, seed {run['seed']}: {asked}."]
    if chart:
        lines += ["", f"![held-out accuracy by method]({chart})"]
    if notes:
        lines += ["", notes.rstrip()]
    return "\n".join(lines) + "\n"


def draw(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["methods"])
    means = [100 * summary["methods"][m]["mean"] for m in names]
    spreads = [100 * summary["methods"][m]["spread"] for m in names]
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(names) + 2), 3.5))
    ax.bar(names, means, yerr=spreads, capsize=3, color="#4c78a8")
    ax.axhline(100 * summary["sft_accuracy"], color="#e45756", linestyle="--", label="SFT start")
    ax.set_ylabel("held-out accuracy (%)")
    ax.legend(loc="lower right")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_page(summary: dict, args: argparse.Namespace, digests: dict[str, str | None]) -> None:
    """The chart and the page (the table, then the notes) of the figures in `summary`; a row whose recipe files
    changed since it was measured (`digests`: each method's `recipe_digest` now; `--page_only` after a recipe
    edit) is marked as such."""
    stale = frozenset(m for m, row in summary["methods"].items() if row.get("recipe_digest") != digests.get(m))
    draw(summary, Path(args.chart))
    out = Path(args.out)
    rel_chart = os.path.relpath(Path(args.chart).resolve(), out.resolve().parent)  # as the page links it
    out.parent.mkdir(parents=True, exist_ok=True)
    notes = Path(args.notes).read_text() if args.notes else ""
    out.write_text(markdown(summary, rel_chart, notes, stale))


def kept(previous: dict, summary: dict, digests: dict[str, str | None]) -> dict:
    """The methods an earlier run measured from the same SFT start (the same weights) and this run did not:
    they stay on the page (each row says its seeds), so methods can be measured one invocation at a time. Rows
    of another recipe, of another start, or measured before a file of theirs changed (`digests`: each method's
    `recipe_digest` now) go."""
    if (previous.get("recipe", "tiny"), previous.get("sft_weights")) != (summary["recipe"], summary["sft_weights"]):
        return {}
    return {
        m: row
        for m, row in previous.get("methods", {}).items()
        if m not in summary["methods"]
        and row.get("recipe_digest") is not None
        and row["recipe_digest"] == digests.get(m)
    }
