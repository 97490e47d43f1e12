"""Prefect artifacts of a stage: its model (URI, where a link can open, how to load it), the
trackers' records, a metrics table and its curves. Always keyed (keys are lowercase, digits, dashes).

Pictures are markdown artifacts holding the PNG inline: Prefect's image artifact shows its
image URL as text under the picture (a whole base64 data URL), and a `file://` or store URL
would not open in the browser anyway.
"""

from __future__ import annotations

import base64
import json
import os
import re

from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from alignflow.tasks.presentation import curves
from alignment import storage

# Where an s3:// URI opens in a browser, e.g. the AWS console:
#   https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={key}/
# Unset: no link (a file:// or s3:// href would resolve against the Prefect UI's host).
CONSOLE_URL_ENV = "ALIGNFLOW_S3_CONSOLE_URL"

LOADERS = {"rm": "AutoModelForSequenceClassification"}  # the transformers class per stage; default causal LM


def artifact_key(*parts: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")


def read_metrics(model_uri: str) -> list[dict]:
    text = storage.read_text(storage.file_in(model_uri, "metrics.jsonl")) or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def browser_url(uri: str) -> str | None:
    """A URL a browser can open for a store URI, or None."""
    if uri.startswith(("http://", "https://")):
        return uri
    template = os.environ.get(CONSOLE_URL_ENV)
    if template and uri.startswith("s3://"):
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return template.format(bucket=bucket, key=key)
    return None


def load_snippet(stage: str, model_uri: str) -> str:
    """Python that loads the committed output with plain transformers."""
    if stage == "batch_inference":
        return (
            f"from alignment import storage\nrows = [json.loads(l) for l in "
            f"storage.read_text(storage.file_in({model_uri!r}, 'output.jsonl')).splitlines()]"
        )
    cls = LOADERS.get(stage, "AutoModelForCausalLM")
    local = model_uri.removeprefix("file://")
    if storage.is_remote(model_uri):  # a store URI: fetched once into the local cache
        return (
            f"from alignment.models.loading import resolve_model_path\nfrom transformers import {cls}\n"
            f"model = {cls}.from_pretrained(resolve_model_path({model_uri!r}))"
        )
    return f"from transformers import {cls}\nmodel = {cls}.from_pretrained({local!r})"


def model_markdown(stage: str, run_name: str, model_uri: str, tracking: dict[str, str]) -> str:
    lines = [f"### {stage} output of run `{run_name}`", "", f"Store URI: `{model_uri}`"]
    url = browser_url(model_uri)
    if url:
        lines.append(f"[open in the object store console]({url})")
    for name, where in tracking.items():
        lines.append(f"- {name}: [{where}]({where})" if where.startswith("http") else f"- {name}: `{where}`")
    lines += ["", "```python", load_snippet(stage, model_uri), "```"]
    return "\n".join(lines)


def image_markdown(png: bytes, caption: str, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})\n\n{caption}"


async def publish_curves(run_name: str, stage: str, panels: list[curves.Panel], note: str = "") -> bytes | None:
    """The stage's curve artifact (a new version each call, so it can follow a running stage)."""
    png = curves.render(panels, f"{run_name} / {stage}")
    if png is None:
        return None
    drawn = ", ".join(name for p in panels for name in p.series)
    caption = f"Series: {drawn}.{' ' + note if note else ''}"
    await acreate_markdown_artifact(
        key=artifact_key(run_name, stage, "curve"),
        markdown=image_markdown(png, caption, stage),
        description=f"{stage} curves of run {run_name}",
    )
    return png


async def publish_stage(
    run_name: str, stage: str, model_uri: str, rows: list[dict], stage_dir: str, manifest: dict
) -> None:
    """Artifacts of a committed stage; its final curve is also saved next to the model."""
    prefix = artifact_key(run_name, stage)
    tracking = manifest.get("metadata", {}).get("tracking") or {}
    await acreate_markdown_artifact(
        key=f"{prefix}-model",
        markdown=model_markdown(stage, run_name, model_uri, tracking),
        description=f"Committed {stage} output of run {run_name}",
    )
    if stage == "batch_inference":
        rewards = json.loads(storage.read_text(storage.file_in(model_uri, "rewards.json")) or "[]")
        panels = curves.reward_histogram(rewards, f"reward of the {len(rewards)} samples")
    else:
        panels = curves.stage_panels(stage, rows)
    logged = [r for r in rows if any(k.startswith(("train/", "eval/")) for k in r)]
    if logged:
        table = [
            {k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items() if k != "time"} for r in logged[-50:]
        ]
        await acreate_table_artifact(
            key=f"{prefix}-metrics", table=table, description=f"{stage} metrics (last {len(table)} logged steps)"
        )
    png = await publish_curves(run_name, stage, panels, f"Also at {stage_dir}/curves.png")
    if png is not None:
        fs, path = storage.filesystem(stage_dir)
        with fs.open(f"{path}/curves.png", "wb") as f:
            f.write(png)
