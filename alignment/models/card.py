"""The model card every committed model carries: `README.md` in Hugging Face's model-card format
(huggingface_hub's ModelCard), written by `saving.commit_model` beside the weights before the
MANIFEST, so the manifest's hashes cover it.

Its YAML header holds what a program reads back (`read_lineage`; `alignment.lineage` walks it):

    base_model   the first model of the chain: a hub name, or an imported or random-init folder
    datasets     the data flags' values
    model-index  the stage's final eval/* metrics, in the hub's evaluation-results form
    alignflow    a `Lineage`: stage, parents (the models it was trained from, by flag), data
                 fingerprints, final metrics, wall time, code version

The body says the same for people, with the stage's resolved config as YAML. The config is its
public form (secret fields masked) and the whole card is scrubbed of the credentials the process
holds (alignment/redact.py). Torch-free: the flows read cards too.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import psutil
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from alignment import storage
from alignment.config.base import path_fields, public_dict
from alignment.config.stages import StageConfig
from alignment.fingerprint import fingerprint
from alignment.models.kind import is_vision_model
from alignment.redact import scrub

log = logging.getLogger(__name__)

CARD = "README.md"
PRIMARY_PARENT = "pretrain"  # the chain a lineage follows: the weights a stage starts from
CODE_VERSION_ENV = "ALIGNFLOW_CODE_VERSION"  # set by the flow for its stage jobs (their code has no .git)


@dataclass
class Lineage:
    """Where a committed model came from: the card's `alignflow` header."""

    stage: str
    parents: dict[str, str] = field(default_factory=dict)  # flag -> model: store URI, absolute path or hub name
    base_model: str | None = None  # the chain's first model
    datasets: dict[str, str] = field(default_factory=dict)  # flag -> its value (files, json@DIR, hub names)
    data_fingerprints: dict[str, dict[str, str]] = field(default_factory=dict)  # flag -> {local path: content}
    final_metrics: dict[str, float] = field(default_factory=dict)
    wall_time_s: float | None = None  # the committing process's, model loading included
    code_version: str | None = None  # alignflow's git commit, else its package version

    @property
    def parent(self) -> str | None:
        """The model this one continues from (--pretrain), which a lineage follows."""
        return self.parents.get(PRIMARY_PARENT) or next(iter(self.parents.values()), None)


_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # NAME or ORG/NAME


def is_local_ref(ref: str) -> bool:
    """A store URI or a path (existing, or that can't be a hub name); else a hub name."""
    return "://" in ref or os.path.exists(os.path.expanduser(ref)) or not _HUB_NAME.match(ref)


def model_ref(value: str) -> str:
    """A model flag's value as a card records it: store URIs and hub names as given, local paths absolute."""
    if "://" in value or not os.path.exists(os.path.expanduser(value)):
        return value
    return os.path.abspath(os.path.expanduser(value))


def read_lineage(uri: str) -> Lineage | None:
    """The lineage in the card of the model at `uri` (a local folder or store URI); None when it has
    no card written by alignflow (a hub download, a random-init base, an older output)."""
    text = storage.read_text(storage.file_in(uri, CARD))
    if text is None:
        return None
    facts = ModelCard(text, ignore_metadata_errors=True).data.to_dict().get("alignflow")
    if not isinstance(facts, dict) or "stage" not in facts:
        return None
    known = {f.name for f in fields(Lineage)}
    return Lineage(**{k: v for k, v in facts.items() if k in known})


def _base_of(parent: str | None) -> str | None:
    """The base model of a chain continued from `parent`: its card's, or the parent itself."""
    if parent is None or not is_local_ref(parent):
        return parent
    try:
        found = read_lineage(parent)
    except (storage.StorageError, OSError, ValueError) as e:  # the card must not fail a finished training
        log.warning("model card: could not read the card of %s (%s); its base is recorded as itself", parent, e)
        return parent
    return (found.base_model or parent) if found else parent


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """ALIGNFLOW_CODE_VERSION if set; else the git commit of the checkout this code runs from
    (`+modified` with uncommitted changes to tracked files); else the installed package's version."""
    if os.environ.get(CODE_VERSION_ENV):
        return os.environ[CODE_VERSION_ENV]
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        try:
            git = ["git", "-C", str(root)]
            head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True)
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            return head.stdout.strip() + ("+modified" if dirty.stdout.strip() else "")
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        return f"alignflow {package_metadata.version('alignflow')}"
    except package_metadata.PackageNotFoundError:
        return "unknown"


def lineage_of(cfg: StageConfig, metadata: dict[str, Any]) -> Lineage:
    """The lineage of the model a stage with config `cfg` is committing (`metadata`: the manifest's)."""
    kinds = path_fields(cfg)
    given = {
        name: getattr(cfg, name) for name in kinds if isinstance(getattr(cfg, name, None), str) and getattr(cfg, name)
    }
    parents = {name: model_ref(v) for name, v in given.items() if kinds[name] == "model"}
    datasets = {name: v for name, v in given.items() if kinds[name] == "data"}
    metrics = {
        k: float(v)
        for k, v in (metadata.get("final_metrics") or {}).items()
        if isinstance(v, (int, float)) and k != "time"
    }  # "time": the last row's clock, not a result
    lineage = Lineage(
        metadata["stage"],
        parents,
        None,
        datasets,
        {n: fingerprint(v) for n, v in datasets.items()},
        metrics,
        round(time.time() - psutil.Process().create_time(), 1),
        code_version(),
    )
    lineage.base_model = _base_of(lineage.parent)
    return lineage


def _eval_results(lineage: Lineage) -> list[EvalResult]:
    data = lineage.datasets.get("eval_dataset") or next(iter(lineage.datasets.values()), "unknown")
    task = "text-classification" if lineage.stage == "rm" else "text-generation"
    return [
        EvalResult(
            task_type=task, dataset_type=data, dataset_name=data, metric_type=k.removeprefix("eval/"), metric_value=v
        )
        for k, v in lineage.final_metrics.items()
        if k.startswith("eval/") and math.isfinite(v)
    ]


def _table(head: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _body(lineage: Lineage, config: dict[str, Any], save_path: str, tracking: dict[str, str]) -> str:
    parents = _table(("from", "model"), [(f"--{k}", f"`{v}`") for k, v in lineage.parents.items()])
    data = _table(
        ("flag", "data", "content fingerprint"),
        [
            (
                f"--{k}",
                f"`{v}`",
                "; ".join(f"`{p}`: `{fp}`" for p, fp in lineage.data_fingerprints[k].items())
                or "(not local: its name is its identity)",
            )
            for k, v in lineage.datasets.items()
        ],
    )
    metrics = _table(("metric", "final value"), [(k, f"{v:.6g}") for k, v in lineage.final_metrics.items()])
    loop = lineage.final_metrics.get("time/loop_s")
    return "\n".join(
        [
            f"# alignflow {lineage.stage} model",
            "",
            f"Committed at `{save_path}` by alignflow's `{lineage.stage}` stage on "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}.",
            "",
            "## Lineage",
            "",
            parents if lineage.parents else "No input model (trained from scratch).",
            "",
            f"Base model (the chain's first): `{lineage.base_model}`. The whole chain: "
            f"`python -m alignment.cli.lineage {save_path}`.",
            "",
            "## Data",
            "",
            data if lineage.datasets else "No dataset flags.",
            "",
            "## Results",
            "",
            metrics if lineage.final_metrics else "No metrics were logged.",
            "",
            "## Provenance",
            "",
            f"- code version: `{lineage.code_version}`",
            f"- wall time: {lineage.wall_time_s:.0f} s (the committing process, model loading included)"
            + (f"; training loop {loop:.0f} s" if loop is not None else ""),
            *(f"- {name}: `{where}`" for name, where in tracking.items()),
            "",
            "## Training config",
            "",
            "```yaml",
            yaml.safe_dump(config, sort_keys=True).rstrip(),
            "```",
            "",
        ]
    )


def _scrubbed(value: Any) -> Any:
    """`value` (plain JSON types) with every string scrubbed: before YAML quotes it, so a masked
    value stays a valid YAML string."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {_scrubbed(k): _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    return value


def build_card(cfg: StageConfig, metadata: dict[str, Any], pipeline_tag: str | None = None) -> ModelCard:
    """The card of the model a stage with config `cfg` is committing with `metadata`; `pipeline_tag` the hub's
    task name when it is not plain text generation (a vision-language model's image-text-to-text)."""
    lineage = Lineage(**_scrubbed(asdict(lineage_of(cfg, metadata))))
    config = _scrubbed(json.loads(json.dumps(public_dict(cfg), default=str)))  # plain YAML types; secrets masked
    save_path = scrub(str(cfg.outputs().uri or ""))
    results = _eval_results(lineage)
    data = ModelCardData(
        base_model=lineage.base_model,
        datasets=list(dict.fromkeys(lineage.datasets.values())) or None,
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=["alignflow", lineage.stage],
        eval_results=results or None,
        model_name=save_path if results else None,
        alignflow=asdict(lineage),
    )
    body = _body(lineage, config, save_path, _scrubbed(dict(metadata.get("tracking") or {})))
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def write_card(out_dir: Path, cfg: StageConfig, metadata: dict[str, Any]) -> None:
    """README.md into the staged output `out_dir` (before its commit: the manifest covers it)."""
    task = "image-text-to-text" if is_vision_model(str(out_dir)) else None
    (Path(out_dir) / CARD).write_text(build_card(cfg, metadata, task).content, encoding="utf-8")
