"""docs/benchmarks.md and its chart from the measured comparisons."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.compare.workloads import Comparison

PEAK_FP32_GFLOPS = 157.0  # this CPU's measured fp32 matmul rate with 2 threads (shared/STACK.md)
METHOD = """\
## How it is measured

- **Pair-wise, in one run.** Per workload: warm-up round(s), not recorded, then N rounds; each round
  runs every side once in the same order (ours, TRL, ours, TRL, …), each as a fresh subprocess, so
  drift of the machine (another job, thermal state) hits both sides alike. Figures are min / median /
  max over the N rounds; the ratio is median(ours) / median(baseline).
- **Throughput excludes start-up the same way on both sides**: the clock runs from the end of
  optimizer step 1 to the end of the last step (our trainers log a wall-clock `time` per step,
  `--logging_steps 1`; TRL's side records `time.time()` in a `TrainerCallback.on_step_end`).
  Imports, model loading, data preparation and step 1 (allocator warm-up) are outside; saving the
  final model is after the last step. Units per step: SFT counts the real (non-pad) tokens of each
  step (TRL: counted in its collator; ours: the CLI's own tokenizer and seeded sampler replayed);
  RM and DPO count pairs; RL reports seconds per iteration (generate n samples per prompt, score,
  compute log-probs/advantages, one optimizer step), lower is better.
- **Orchestration**: the demo's SFT stage as the bare `train_sft` CLI (whole command, start-up
  included) vs the same CLI and config through the `sft` flow (Prefect ephemeral API → local Ray
  head → Ray job). The flow gives two rows from the same runs: the stage task (Ray job submitted →
  job done → model committed: the overhead each stage of a pipeline pays, which the ≤ 5 % goal is
  about) and the whole flow command (plus starting and stopping the Prefect API and the Ray head,
  paid once per flow run). The Prefect database is kept between runs, as a user's would be.
- **Peak memory** is the larger of the kernel's high-water RSS of the child (`wait4` rusage) and
  the highest sum of RSS over its whole process tree sampled every 0.2 s (the benchmark is a child
  subreaper, so Ray's daemons stay in the tree). Sums over several processes count shared pages
  more than once: an upper bound for the Ray and vLLM runs.
- **Equal settings**: same random-init model directory, tokenizer, data files and chat template; fp32
  (`bf16=False`), SDPA attention, no gradient checkpointing, constant lr without warm-up, AdamW
  betas (0.9, 0.95), no weight decay, clip 1.0, the same torch thread count, `HF_HUB_OFFLINE=1`,
  `report_to="none"`. Ours runs DeepSpeed ZeRO-2 (its default) in one process; TRL runs plain
  `Trainer` (accelerate, one process). Packing: ours puts a micro-batch's samples first-fit
  into rows of ≤ `--max_len` tokens with a block-diagonal mask; TRL's SFT packs best-fit rows of
  `max_length` and flattens a batch padding-free. TRL's DPO and RM pad (its DPO padding-free is
  disabled in 1.16); ours packs. DPO: a frozen reference model's forward every step on both sides
  (`precompute_ref_log_probs=False`). RL: no KL term (TRL `beta=0` loads no reference model;
  ours, `--init_kl_coef 0`, runs no reference forward either, and with one optimizer step per
  rollout no old-log-prob forward).
"""


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _stats(samples) -> tuple[float, float, float]:
    v = [s.value for s in samples]
    return min(v), statistics.median(v), max(v)


def _rss(samples) -> float:
    return statistics.median(s.peak_rss_mb for s in samples)


def summary_rows(comp: Comparison) -> list[dict]:
    """One row per non-baseline side: stats, ratio of medians, goal verdict, memory."""
    base = comp.results[comp.baseline]
    _, base_med, _ = _stats(base)
    rows = []
    named = len(comp.results) + len(comp.skipped) > 2  # several of ours: each row says which
    for label, samples in comp.results.items():
        if label == comp.baseline:
            continue
        lo, med, hi = _stats(samples)
        ratio = med / base_med
        if comp.goal_ratio <= 0:
            verdict = "—"
        else:
            met = ratio >= comp.goal_ratio if comp.higher_is_better else ratio <= comp.goal_ratio
            verdict = "met" if met else "**missed**"
        pairs = [a.value / b.value for a, b in zip(samples, base)]
        name = f"{comp.title}, {label}" if named else comp.title
        rows.append(
            dict(
                name=name,
                label=label,
                stats=(lo, med, hi),
                base=_stats(base),
                ratio=ratio,
                pair_range=(min(pairs), max(pairs)),
                verdict=verdict,
                rss=_rss(samples),
                base_rss=_rss(base),
            )
        )
    return rows


def skipped_rows(comp: Comparison) -> list[str]:
    return [
        f"| {comp.title}, {label} | {comp.unit} | {why} | — | — | {comp.goal} | not run | — |"
        for label, why in comp.skipped.items()
    ]


def speedup(comp: Comparison, ratio: float) -> float:
    """>1 means ours is faster, whatever the unit."""
    return ratio if comp.higher_is_better else 1.0 / ratio


def write_markdown(path: Path, comps: list[Comparison], info: dict) -> None:
    lines = [*_header(info), *_results(comps, info["params"]), "![ours vs baseline](" + info["png_rel"] + ")", ""]
    lines += ["## Per workload", ""]
    for comp in comps:
        lines += _per_workload(comp)
    lines.append(METHOD)
    notes = Path(__file__).with_name("profile_notes.md")
    if notes.exists():
        lines += ["", notes.read_text().rstrip(), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _header(info: dict) -> list[str]:
    m, v = info["machine"], info["versions"]
    cfg, params = info["model"], info["params"]
    return [
        "# Benchmarks: alignflow vs TRL on this CPU",
        "",
        f"Generated by `{info['command']}` on {time.strftime('%Y-%m-%d %H:%M', time.localtime())} "
        f"({info['duration_min']:.0f} min). {info['pairs']} recorded pair(s) per workload after "
        f"{info['warmup']} warm-up round(s).",
        "",
        "**Machine**: " + ", ".join(f"{k} {x}" for k, x in m.items()) + ".  ",
        "**Versions**: " + ", ".join(f"{k} {x}" for k, x in v.items()) + ".",
        "",
        f"**Model** (workloads 1–4): a random-init {cfg['model_type']} built from data/tiny/llama_config.json "
        f"with overrides, **{params:,} parameters** ({params / 1e6:.1f} M): "
        + ", ".join(f"{k} {x}" for k, x in cfg.items() if k != "model_type")
        + f". Tokenizer and data: the shipped tiny world (data/tiny). fp32, {info['threads']} torch threads per side.",
        "",
    ]


def _results(comps: list[Comparison], params: int) -> list[str]:
    """The results table, the memory verdict and SFT's model FLOP utilisation."""
    lines = [
        "## Results",
        "",
        "| Workload | unit | ours min / median / max | baseline min / median / max | median ratio ours / baseline "
        "| goal | verdict | peak RSS ours / baseline (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for comp in comps:
        for r in summary_rows(comp):
            lines.append(
                f"| {r['name']} | {comp.unit} | {' / '.join(map(_fmt, r['stats']))} | "
                f"{comp.baseline}: {' / '.join(map(_fmt, r['base']))} | **{r['ratio']:.2f}** | {comp.goal} | "
                f"{r['verdict']} | {r['rss']:.0f} / {r['base_rss']:.0f} |"
            )
        lines += skipped_rows(comp)
    worse = [
        f"{r['name']} ({r['rss'] / r['base_rss']:.2f}×)"
        for c in comps
        if c.baseline == "TRL"
        for r in summary_rows(c)
        if r["rss"] > r["base_rss"]
    ]
    lines += [
        "",
        "Ratios are median(ours) / median(baseline) in the row's unit: above 1 is better for tokens/s and "
        "pairs/s, below 1 is better for seconds. Peak memory goal (no worse than TRL's): "
        + ("met in every workload." if not worse else "**missed** in " + ", ".join(worse) + "."),
        "",
    ]
    sft = next((c for c in comps if c.key == "sft"), None)
    if sft:
        for r in summary_rows(sft):
            mfu = 6 * params * r["stats"][1] / (PEAK_FP32_GFLOPS * 1e9)
            mfu_trl = 6 * params * r["base"][1] / (PEAK_FP32_GFLOPS * 1e9)
            lines.append(
                f"Model FLOP utilisation in SFT (6 × params × tokens/s ÷ {PEAK_FP32_GFLOPS:.0f} GFLOP/s, "
                f"attention not counted): ours {mfu:.0%}, TRL {mfu_trl:.0%}."
            )
        lines.append("")
    return lines


def _per_workload(comp: Comparison) -> list[str]:
    lines = [
        f"### {comp.title}",
        "",
        f"Settings: {comp.settings}.",
        "",
        f"| side | {comp.unit}: min | median | max | per-round values | peak RSS MB (median) | wall s (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, samples in comp.results.items():
        lo, med, hi = _stats(samples)
        vals = ", ".join(_fmt(s.value) for s in samples)
        wall = statistics.median(s.wall_s for s in samples)
        lines.append(f"| {label} | {_fmt(lo)} | {_fmt(med)} | {_fmt(hi)} | {vals} | {_rss(samples):.0f} | {wall:.1f} |")
    for label, why in comp.skipped.items():
        lines.append(f"\n{label}: {why}.")
    for r in summary_rows(comp):
        lines.append(
            f"\n{r['label']} / {comp.baseline}: median ratio {r['ratio']:.2f} (per-round ratios "
            f"{r['pair_range'][0]:.2f}–{r['pair_range'][1]:.2f}); goal {comp.goal}: {r['verdict']}."
        )
    lines.append("")
    return lines


def write_chart(path: Path, comps: list[Comparison]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, speed, err, goals, rss = [], [], [[], []], [], []
    for comp in comps:
        for r in summary_rows(comp):
            s = speedup(comp, r["ratio"])
            lo, hi = sorted(speedup(comp, x) for x in r["pair_range"])
            names.append(r["name"].replace("RL iteration: ", "RL: ").replace(", ", "\n", 1))
            speed.append(s)
            err[0].append(max(s - lo, 0))
            err[1].append(max(hi - s, 0))
            goals.append(speedup(comp, comp.goal_ratio) if comp.goal_ratio > 0 else None)
            rss.append((r["rss"], r["base_rss"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.6 * len(names) + 2))
    y = range(len(names))
    ax1.barh(list(y), speed, xerr=err, color=["#2a7" if s >= 1 else "#c63" for s in speed], capsize=3)
    for i, g in enumerate(goals):
        if g:
            ax1.plot([g, g], [i - 0.4, i + 0.4], color="k", lw=2)
    ax1.axvline(1.0, color="grey", ls="--", lw=1)
    ax1.set_yticks(list(y), names, fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel("speed vs baseline (>1: ours faster; bar: median ratio, whiskers: per-round range, tick: goal)")
    ax2.barh([i - 0.2 for i in y], [a for a, _ in rss], height=0.4, label="ours", color="#2a7")
    ax2.barh([i + 0.2 for i in y], [b for _, b in rss], height=0.4, label="baseline (TRL / bare CLI)", color="#888")
    ax2.set_yticks(list(y), [""] * len(names))
    ax2.invert_yaxis()
    ax2.set_xlabel("peak RSS (MB, median)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
