"""The pictures a stage publishes: curves that fit its kind, a reward histogram, a chart of rounds.

Two steps, so the tests can check what is drawn without reading pixels: `*_panels` pick the
series out of the metrics rows (pure), `render` draws panels into a PNG. Torch-free.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

Point = tuple[float, float]


@dataclass(frozen=True)
class PanelSpec:
    title: str
    keys: tuple[str, ...]  # metrics.jsonl keys drawn in this panel, against step
    ylabel: str = ""


@dataclass
class Panel:
    title: str
    series: dict[str, list[Point]] = field(default_factory=dict)  # legend name -> (x, y) points
    xlabel: str = "step"
    ylabel: str = ""
    kind: str = "line"  # "line", "hist" (each series' y values are the samples) or "bar" (one bar per series)


def _loss(*extra: str) -> PanelSpec:
    return PanelSpec("loss", ("train/loss", "eval/loss", *extra), "loss")


STAGE_PANELS: dict[str, tuple[PanelSpec, ...]] = {
    "sft": (_loss(),),
    "rm": (_loss(), PanelSpec("pairwise accuracy", ("train/acc", "eval/acc"), "chosen > rejected")),
    "dpo": (
        _loss(),
        PanelSpec("reward margin", ("train/reward_margin", "eval/reward_margin"), "chosen - rejected"),
        PanelSpec("reward accuracy", ("train/reward_acc", "eval/reward_acc"), "margin > 0"),
    ),
    "kto": (
        _loss(),
        PanelSpec(
            "implicit rewards", ("train/desirable_reward", "train/undesirable_reward", "eval/reward_gap"), "reward"
        ),
        PanelSpec("KL estimate", ("train/kl",), "nats"),
    ),
    "ppo": (
        PanelSpec("reward", ("train/reward",), "score per sample"),
        PanelSpec("KL to the reference", ("train/kl", "train/kl_loss"), "nats per response"),
        PanelSpec("response length", ("train/response_length",), "tokens"),
        PanelSpec("policy", ("train/clipfrac", "train/entropy", "train/approx_kl"), "fraction / nats"),
        PanelSpec(
            "phase times",
            ("train/time_generate", "train/time_experience", "train/time_train", "train/time_sync"),
            "seconds per iteration",
        ),
        # shown where they apply: agent episodes, --dynamic_filtering, --enable_vllm_is_correction, evaluation
        PanelSpec("agent turns", ("train/agent/turns",), "model turns per episode"),
        PanelSpec(
            "dynamic filtering",
            ("train/dynamic_filtering/dropped_fraction", "train/dynamic_filtering/gradient_token_share"),
            "groups dropped / tokens to a gradient",
        ),
        PanelSpec("IS correction", ("train/is_weight",), "mean truncated weight"),
        # --eval_dataset: the held-out answers every --eval_steps (alignment/ppo/evaluation.py)
        PanelSpec("held-out evaluation", ("eval/pass*",), "reward (pass1: mean, pass<n>: best of n)"),
        PanelSpec("partial rollouts", ("train/partial/across_updates_fraction",), "responses across an update"),
        # --async_train: how many updates behind the trained policy its samples are (alignment/ppo/staleness.py)
        PanelSpec("staleness", ("train/staleness/mean", "train/staleness/max"), "updates behind, per sample"),
    ),
}


def _matching(prefix: str, rows: list[dict]) -> list[str]:
    return sorted({k for r in rows for k in r if k.startswith(prefix[:-1])})


def stage_panels(stage: str, rows: list[dict]) -> list[Panel]:
    """The panels of `stage`'s kind that have data in `rows`. A PPO run without a KL term logs no
    KL: its panel is left out rather than drawn as zeros."""
    specs = STAGE_PANELS.get(stage, (_loss(),))
    panels = []
    for spec in specs:
        # a key ending in * stands for every key it begins (eval/pass*: pass1 and pass<n> of --eval_n_samples)
        keys = [k for key in spec.keys for k in (_matching(key, rows) if key.endswith("*") else [key])]
        series = {k: [(float(r["step"]), float(r[k])) for r in rows if k in r] for k in keys}
        series = {k: pts for k, pts in series.items() if pts}
        if series:
            panels.append(Panel(spec.title, series, ylabel=spec.ylabel))
    return panels


def reward_histogram(rewards: list[float], title: str) -> list[Panel]:
    return (
        [Panel(title, {"reward": [(0.0, float(r)) for r in rewards]}, xlabel="reward", ylabel="samples", kind="hist")]
        if rewards
        else []
    )


def rounds_panels(history: list[dict]) -> list[Panel]:
    """One point per round of an iterative run (the policy pointer's history): held-out accuracy
    where the round was evaluated, and the mean sampled reward of its generated data."""
    keys = {"held-out accuracy": "heldout_accuracy", "mean sampled reward": "sampled_reward"}
    panels = []
    for title, key in keys.items():
        pts = [(float(h["round"]), float(h[key])) for h in history if h.get(key) is not None]
        if pts:
            panels.append(Panel(title, {key: pts}, xlabel="round", ylabel=title))
    return panels


def render(panels: list[Panel], title: str) -> bytes | None:
    """A PNG with one subplot per panel (two columns); None when there is nothing to draw."""
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 1 if len(panels) == 1 else 2
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), dpi=90, squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for name, pts in panel.series.items():
            if panel.kind == "hist":
                ax.hist([y for _, y in pts], bins=30, label=name)
            elif panel.kind == "bar":
                ax.bar([name], [pts[0][1]], label=name)
            else:
                ax.plot(*zip(*pts), label=name, marker="o" if len(pts) < 30 else None)
        ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
