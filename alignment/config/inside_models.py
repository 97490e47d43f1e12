"""An output inside an input model's folder (config/paths.py refuses the other way round: a model inside
the output). Writing a run's output or checkpoints into --pretrain's folder changes that model's folder
while the run reads it: its fingerprint (a rerun's identity), its manifest check when it is a committed
output (an unlisted folder), and the next commit over that model deletes the output with it."""

from __future__ import annotations

import os
from typing import Any

from alignment.config.base import path_fields, require
from alignment.config.paths import normalized, within


def _local_model(path: str) -> bool:
    """A model that is a folder here or a store URI: a hub name (org/name) names no folder of ours."""
    return "://" in path or os.path.isdir(normalized(path))


def check_outputs_outside_models(cfg: Any) -> None:
    """--save_path/--output_path, and --ckpt_path of a run that writes checkpoints, lie outside every input
    model (--pretrain, --ref_pretrain, --reward_pretrain, --teacher_model ...). Raises ConfigError."""
    outputs = cfg.outputs()
    written = [(outputs.flag, outputs.uri)] + ([("--ckpt_path", outputs.ckpt)] if outputs.checkpoints else [])
    models = {name: getattr(cfg, name) for name, what in path_fields(cfg).items() if what == "model"}
    for flag, out in written:
        if not out or not out.strip():
            continue  # an empty output is refused with its own line
        for name, value in models.items():
            for model in (value or "").split(","):
                require(
                    not model or not _local_model(model) or not within(out, model),
                    f"{flag} {out}: inside --{name} {model}; a run must not write into a model it reads (it "
                    f"changes that model's folder, and a commit over the model deletes what is inside): pass a "
                    f"folder outside it",
                )
