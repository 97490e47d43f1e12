"""Whose a checkpoint is: the stage, the config that shapes the training, and the trained weights' shapes.

Two runs that share one --ckpt_path one after the other (every run's default `./ckpt/checkpoints` from one
directory) would resume from each other's checkpoints: another seed, another dataset, another method, or
a model of another width at the same --pretrain path (a DeepSpeed `size mismatch` traceback). So each
checkpoint records the run's identity in its manifest, and a resume compares before any of its weights
load: the config when the run starts, the shapes once the engines are built. A mismatch is one line
(ConfigError, exit 2) naming the first difference.

The config compared is what a flow hashes as the stage's identity (fields marked identity=False are left
out: outputs, cadences, trackers) less what a resume may change without changing what is trained: the
run's length (--max_steps, --max_epochs, --num_episodes, which a resume may extend), the placement and
memory knobs (nodes and GPUs — the world size has its own check —, vLLM engines, colocation, offload,
micro-batch sizes and token budgets, gradient checkpointing, attention kernels), evaluation cadence, and
--pretrain's path (the trained weights' shapes are compared instead).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from alignment.config.base import ConfigError, not_identity_fields
from alignment.config.stages import StageConfig

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine

KEY = "run"  # the manifest metadata key
RESUMABLE = frozenset(
    {"max_steps", "max_epochs", "num_episodes", "eval_steps", "enforce_eager", "enable_prefix_caching"}
    | {"max_nonfinite_skips", "flash_attn", "zpg", "packing_samples", "use_dynamic_batch", "async_queue_size"}
    | {"train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu"}
    # the checkpoint holds every trained weight: --pretrain names the architecture and the tokenizer, which the
    # shape check covers (a copy of the base elsewhere, or the run's own output, resumes the same run)
    | {"pretrain"}
)
_RESUMABLE_PARTS = ("num_nodes", "num_gpus_per_node", "vllm_", "colocate_", "micro_", "gradient_checkpointing")
_RESUMABLE_PARTS += ("ring_", "_offload")


def compared(name: str) -> bool:
    """Whether a resume must keep this field (it shapes what is trained), given it is in the stage's identity."""
    return name not in RESUMABLE and not any(part in name for part in _RESUMABLE_PARTS)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class RunIdentity:
    stage: str
    config: dict[str, Any]  # field -> value, JSON-plain

    @classmethod
    def of(cls, cfg: StageConfig) -> "RunIdentity":
        """The identity of a run of `cfg` (its stage: the config's class, SFTConfig, PPOConfig, ...)."""
        stage = type(cfg).__name__
        skip = not_identity_fields(cfg)
        values = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in skip and compared(f.name)}
        return cls(stage, _plain(values))

    def record(self, engines: dict[str, DeepSpeedEngine] | None = None) -> dict[str, Any]:
        """What a checkpoint's manifest keeps: stage, config and (engines given) the trained weights' shapes."""
        return {"stage": self.stage, "config": self.config, **({"shapes": shapes(engines)} if engines else {})}

    def check(self, recorded: dict[str, Any] | None, uri: str) -> None:
        """ConfigError when the checkpoint at `uri` (its record) is another run's. A checkpoint of an older
        version records nothing: resumed as before."""
        if not recorded:
            return
        if recorded.get("stage") != self.stage:
            self._refuse(uri, f"stage {recorded.get('stage')} there, {self.stage} here")
        there = recorded.get("config") or {}
        for name in sorted(set(there) | set(self.config)):
            if name in there and name in self.config and there[name] != self.config[name]:
                self._refuse(uri, f"config differs: --{name} {there[name]} there vs {self.config[name]} here")

    def check_shapes(self, recorded: dict[str, Any] | None, engines: dict[str, DeepSpeedEngine], uri: str) -> None:
        """Once the engines are built, before the checkpoint's weights load: the same names and shapes."""
        if recorded and recorded.get("shapes") and recorded["shapes"] != shapes(engines):
            self._refuse(uri, "model shape differs: another model at --pretrain, or another model config")

    @staticmethod
    def _refuse(uri: str, why: str) -> None:
        raise ConfigError(
            f"checkpoint {uri} belongs to another run ({why}): give this run another --ckpt_path, or drop "
            f"--load_checkpoint to start over"
        )


def shapes(engines: dict[str, DeepSpeedEngine]) -> str:
    """A hash of every trained weight's name and full shape (ZeRO-3's ds_shape where a parameter is partitioned)."""
    items = []
    for role, engine in sorted(engines.items()):
        module = getattr(engine, "module", engine)
        for name, p in module.named_parameters():
            items.append((role, name, list(getattr(p, "ds_shape", None) or p.shape)))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]
