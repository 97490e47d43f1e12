"""A committed model's lineage: the chain of models it was trained from, back to its base.

Each hop reads the model's card (alignment/models/card.py) and follows its --pretrain parent (a
store URI or local path); where a folder has no alignflow card (a random-init base, an imported
model, a hub download) its MANIFEST.json, if any, still names its stage, and the walk ends there,
as it does at a hub name. Torch-free: the flows' report shows the final model's lineage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alignment import storage
from alignment.config.base import ConfigError
from alignment.models.card import is_local_ref, read_lineage

MAX_HOPS = 100  # a chain longer than this is a loop the seen-set missed (two spellings of one path)


def _figure(m: dict[str, float], *shown: tuple[str, str, str]) -> str:
    """`label value` for the first (label, metric key, format) the stage logged, each key under its own
    label. A stage shorter than its --logging_steps logged none: it says so, never "nan", which would read
    as a run that diverged."""
    for label, key, spec in shown:
        if key in m:
            return f"{label} {m[key]:{spec}}"
    return f"{shown[-1][0]}: none logged"


def key_metric(stage: str, m: dict[str, float]) -> str:
    """The one figure that says how a finished stage did."""
    if stage == "tiny_base":
        return "random init"
    if stage == "sft":
        return _figure(m, ("eval loss", "eval/loss", ".3f"), ("loss", "train/loss", ".3f"))
    if stage == "rm":
        return _figure(m, ("held-out pair accuracy", "eval/acc", ".1%"), ("pair accuracy", "train/acc", ".1%"))
    if stage in ("dpo", "kto"):
        return _figure(
            m,
            ("reward accuracy", "eval/reward_acc", ".1%"),
            ("reward accuracy", "train/reward_acc", ".1%"),
            ("loss", "train/loss", ".3f"),
        )
    if stage == "ppo":
        return _figure(m, ("sampled reward", "train/reward", ".3f")) + " (last iteration)"
    if stage == "kd":
        return _figure(m, ("KL to the teacher", "train/kd_kl", ".3f")) + " (last step)"
    if stage == "opd":
        return _figure(m, ("reverse KL to the teacher", "eval/kl", ".3f"), ("OPD loss", "train/opd_loss", ".3f"))
    if stage == "given":  # a model a flow measured but did not make (a distillation's teacher)
        return "given, not trained here"
    if stage == "evaluate":
        shown = [
            f"{k} {v:.1%}" if k in ("accuracy", "pair_accuracy") else f"{k} {v:.4g}"
            for k, v in m.items()
            if k != "rows"
        ]
        return f"held-out {', '.join(shown[:2])} ({m.get('rows', 0):.0f} rows)"
    if stage == "batch_inference":
        mean = m.get("mean_reward")
        return f"{m.get('rows', 0):.0f} rows" + (f", mean reward {mean:.3f}" if mean is not None else "")
    return ""


@dataclass
class Hop:
    """One model of a lineage."""

    uri: str
    stage: str  # the stage that made it; "hub" for a hub name; "" where nothing says
    base_model: str | None  # the chain's first model, as its card records it
    metric: str  # key_metric of its final metrics
    parents: dict[str, str] = field(default_factory=dict)  # flag -> model it was trained from
    final_metrics: dict[str, float] = field(default_factory=dict)
    code_version: str | None = None
    card: bool = False  # it has an alignflow model card

    @property
    def parent(self) -> str | None:
        return self.parents.get("pretrain") or next(iter(self.parents.values()), None)


def read_hop(uri: str) -> Hop:
    """What the model at `uri` (store URI, local folder or hub name) says about itself."""
    if not is_local_ref(uri):
        return Hop(uri, "hub", uri, "")
    if not storage.exists(uri):
        raise ConfigError(f"{uri}: no model there; pass a committed model's folder or store URI")
    found = read_lineage(uri)
    if found is not None:
        return Hop(
            uri,
            found.stage,
            found.base_model,
            key_metric(found.stage, found.final_metrics),
            found.parents,
            found.final_metrics,
            found.code_version,
            card=True,
        )
    meta = (storage.read_manifest(uri) or {}).get("metadata") or {}
    stage, metrics = meta.get("stage", ""), meta.get("final_metrics") or {}
    return Hop(uri, stage, meta.get("source") or uri, key_metric(stage, metrics), final_metrics=metrics)


def walk(uri: str) -> list[Hop]:
    """The chain from the model at `uri` back to its base, one Hop per model, newest first."""
    hops, seen = [read_hop(uri)], {uri}
    while hops[-1].card and (parent := hops[-1].parent) and parent not in seen and len(hops) < MAX_HOPS:
        seen.add(parent)
        hops.append(read_hop(parent))
    return hops


def lines(hops: list[Hop]) -> list[str]:
    """One line per hop: stage, URI, base model, key metric."""
    width = max(len(h.stage or "?") for h in hops)
    return [
        f"{h.stage or '?':{width}s}  {h.uri}  base={h.base_model or '-'}" + (f"  {h.metric}" if h.metric else "")
        for h in hops
    ]
