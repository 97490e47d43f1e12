"""Prefect artifacts for a finished stage: model link, metrics table, curve image. Always keyed."""
from __future__ import annotations

import base64
import io
import json
import re

from prefect.artifacts import acreate_image_artifact, acreate_link_artifact, acreate_table_artifact

from alignment import storage


def artifact_key(*parts: str) -> str:
    """Prefect keys: lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")


def read_metrics(model_uri: str) -> list[dict]:
    text = storage.read_text(f"{model_uri}/metrics.jsonl") or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def curve_png(rows: list[dict], title: str) -> bytes | None:
    """Train loss (and eval loss) against step, as a PNG; None when nothing was logged."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {k: [(r["step"], r[k]) for r in rows if k in r] for k in ("train/loss", "eval/loss")}
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for name, points in series.items():
        if points:
            ax.plot(*zip(*points), label=name, marker="o" if len(points) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


async def publish(run_name: str, stage: str, model_uri: str, rows: list[dict], stage_dir: str) -> None:
    prefix = artifact_key(run_name, stage)
    await acreate_link_artifact(key=f"{prefix}-model", link=model_uri, link_text=f"{stage} model",
                                description=f"Committed {stage} model of run {run_name}")
    logged = [r for r in rows if any(k.startswith(("train/", "eval/")) for k in r)]
    if not logged:
        return  # a stage that logs no metrics (e.g. tiny_base) gets only the model link
    table = [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items() if k != "time"} for r in logged[-50:]]
    await acreate_table_artifact(key=f"{prefix}-metrics", table=table,
                                 description=f"{stage} metrics (last {len(table)} logged steps)")
    png = curve_png(rows, f"{run_name} / {stage}")
    if png is not None:
        fs, path = storage.filesystem(stage_dir)
        with fs.open(f"{path}/loss_curve.png", "wb") as f:
            f.write(png)
        await acreate_image_artifact(key=f"{prefix}-curve", image_url="data:image/png;base64," + base64.b64encode(png).decode(),
                              description=f"{stage} loss curve (also at {stage_dir}/loss_curve.png)")
