"""Held-out evaluation in a flow: `evaluate` stages (alignment/cli/evaluate.py) planned beside the stages
they measure, so each is placed on the cluster like the others, cached by identity (a rerun of a
committed evaluation reads it back before any cluster is asked for) and committed to the store.
This module turns a committed evaluation into what the report, the gates and the comparisons read,
and publishes its examples as a table artifact rather than its JSON in the flow log."""

from __future__ import annotations

import base64
import json

from prefect import get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.presentation.artifacts import artifact_key
from alignment import storage
from alignment.config.evaluate import HIGHER_IS_BETTER


def evaluate_step(label: str, model: str | Output, given: dict | None = None) -> Step:
    """The recipe's `evaluate.yaml` (with the run's `given` overrides) run on `model`: an upstream step's
    output or a given URI. Either way the model is the step's input, so one model's evaluation has one
    identity: a round's candidate and, next round, the same model as the current policy share it."""
    return Step(f"evaluate {label}", "evaluate", "evaluate", dict(given or {}), {"pretrain": model})


def read_evaluation(eval_uri: str) -> dict:
    """A committed evaluate stage's result: {"metrics", "accuracy" (when measured), "n", "examples"} with the
    examples as [question, response, label, right] rows (what the report shows)."""
    text = storage.read_text(storage.file_in(eval_uri, "evaluation.json"))
    if text is None:
        raise RuntimeError(f"{eval_uri} is committed but holds no evaluation.json: not an evaluate stage's output")
    saved = json.loads(text)
    examples = [[e["question"], e["response"], str(e.get("label", "")), e.get("right")] for e in saved["examples"]]
    pictures = [(e.get("images") or [None])[0] for e in saved["examples"]]  # each example's first image, if any
    return {
        "metrics": saved["metrics"],
        "n": saved["n"],
        "examples": examples,
        "eval_uri": eval_uri,
        **({"accuracy": saved["metrics"]["accuracy"]} if "accuracy" in saved["metrics"] else {}),
        **({"pictures": pictures} if any(pictures) else {}),
    }


def better(metric: str, new: float, old: float, margin: float) -> bool:
    """Does `new` beat `old` by at least `margin` on `metric` (lower is better for perplexity and nll)?"""
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"metric {metric!r}: not one an evaluate stage commits ({', '.join(HIGHER_IS_BETTER)})")
    return new >= old + margin if HIGHER_IS_BETTER[metric] else new <= old - margin


async def publish_evaluation(label: str, result: dict, run_name: str) -> None:
    """One log line; the examples as a table artifact `<run>-heldout-<label>`."""
    shown = ", ".join(
        f"{k} {v:.1%}" if k in ("accuracy", "pair_accuracy") else f"{k} {v:.4g}"
        for k, v in result["metrics"].items()
        if k != "rows"
    )
    summary = f"held-out evaluation after {label}: {shown} ({result['n']} rows)"
    rows = [{"question": q, "response": r, "answer": a, "right": right} for q, r, a, right in result["examples"]]
    key = artifact_key(run_name, "heldout", label)
    await acreate_table_artifact(key=key, table=rows, description=f"{summary} (first {len(rows)} shown)")
    get_run_logger().info("%s (examples: artifact %s)", summary, key)


async def publish_pictures(run_name: str, evaluations: dict[str, dict]) -> str | None:
    """Held-out pictures with each measured model's answer side by side (a vision-language run's SFT and RL
    models, say), as a markdown artifact `<run>-heldout-pictures`; its key, or None when the evaluations hold no
    pictures or not the same ones."""
    shown = {label: r for label, r in evaluations.items() if r.get("pictures")}
    if len(shown) < 2 or len({tuple(r["pictures"]) for r in shown.values()}) != 1:
        return None
    first = next(iter(shown.values()))
    lines = ["| picture | answer | " + " | ".join(f"after {label}" for label in shown) + " |"]
    lines.append("|---" * (2 + len(shown)) + "|")
    for i, picture in enumerate(first["pictures"]):
        if picture is None:
            continue
        src = picture if picture.startswith("data:") else _data_uri(storage.read_bytes(picture))
        answers = [_answer(r["examples"][i]) for r in shown.values()]
        lines.append(f"| ![{i}]({src}) | {first['examples'][i][2]} | " + " | ".join(answers) + " |")
    key = artifact_key(run_name, "heldout", "pictures")
    await acreate_markdown_artifact(
        key=key,
        markdown="\n".join(lines),
        description=f"held-out pictures and the answers after {', '.join(shown)}",
    )
    return key


def _data_uri(data: bytes) -> str:
    kind = "jpeg" if data[:3] == b"\xff\xd8\xff" else "png"  # the pictures a dataset holds are mostly these
    return f"data:image/{kind};base64,{base64.b64encode(data).decode()}"


def _answer(example: list) -> str:
    """A response for a table cell, marked right or wrong."""
    response = " ".join(str(example[1]).split()).replace("|", "\\|")[:60]
    return f"{response} {'✓' if example[3] else '✗'}"
