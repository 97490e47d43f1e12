"""Save an HF-format model (safetensors) from a DeepSpeed engine, ZeRO-3 and LoRA included."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist

from alignment.config import TrainingConfig
from alignment.config.groups import LoraSaveConfig
from alignment.config.stages import StageConfig
from alignment.datasets.images import processor_of
from alignment.models.card import write_card
from alignment.models.lora import is_lora, merged_state
from alignment.models.reward_model import export_names
from alignment.nonfinite import check_weights
from alignment.outputs import StagedOutput

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


def full_state_dict(engine: DeepSpeedEngine) -> dict[str, torch.Tensor] | None:
    """The whole model's weights on rank 0 (None on other ranks). Collective: call on every rank."""
    if engine.zero_optimization_stage() == 3 or engine.autotp_size() > 1:
        state = engine._consolidated_16bit_state_dict()  # the shards of ZeRO-3 or of AutoTP, gathered whole
    else:
        state = {k: v.detach().cpu().clone() for k, v in engine.module.state_dict().items()}
    rank = dist.get_rank() if dist.is_initialized() else 0
    return state if rank == 0 else None


def policy_weights(engine: DeepSpeedEngine) -> dict[str, torch.Tensor] | None:
    """The weights a rollout engine needs, under their HF names: LoRA adapters merged into the
    base (so engines that know nothing of LoRA, like vLLM, can take them). Collective; rank 0 only."""
    state = full_state_dict(engine)
    if state is None or not is_lora(engine.module):
        return state
    return merged_state(engine.module, state)


@dataclass(frozen=True)
class LoraSave:
    """How a LoRA model is saved: the adapter alone (naming `base`, the model it was trained from, as
    the run gave it: a store URI, directory or hub name), or also merged into the base."""

    base: str
    merge: bool = False


def lora_save(cfg: StageConfig) -> LoraSave | None:
    """The stage's LoRA save policy; None for a stage without --merge_lora (the reward model: merged)."""
    return LoraSave(cfg.model.model_name_or_path, cfg.ds.lora.merge_lora) if isinstance(cfg, LoraSaveConfig) else None


def save_hf_model(
    module: torch.nn.Module,
    state: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    extra_config: dict[str, Any] | None = None,
    rename: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    lora: LoraSave | None = None,
) -> Path:
    """Write config, safetensors weights (in the training dtype) and tokenizer, so plain
    `from_pretrained(out_dir)` loads it. `extra_config` entries go into config.json;
    `rename` maps the final (merged) weight names to the saved ones.

    A LoRA model: with `lora.merge` off, only its adapter as PEFT saves it (adapter_config.json naming
    `lora.base`, adapter_model.safetensors) and the tokenizer; `models.loading.resolve_model_path`
    turns such a folder into a merged model when a later stage loads it. With `lora.merge` (or no
    `lora`: the reward model, whose config.json must carry `extra_config`), the adapter goes to
    `out_dir/adapter` and the merged model to `out_dir`, merged in place in `state` (which is
    consumed), so saving never holds a second copy of the model."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_lora(module) and lora is not None and not lora.merge:
        module.peft_config["default"].base_model_name_or_path = lora.base
        module.save_pretrained(out, state_dict=state, safe_serialization=True)
        save_preprocessing(tokenizer, out)
        return out
    if is_lora(module):
        module.save_pretrained(out / "adapter", state_dict=state, safe_serialization=True)
        model = module.get_base_model()
        state = merged_state(module, state)
    else:
        model = module
    for key, value in (extra_config or {}).items():
        setattr(model.config, key, value)
    state = {k: v.contiguous() for k, v in (rename(state) if rename else state).items()}
    model.save_pretrained(out, state_dict=state, safe_serialization=True)
    save_preprocessing(tokenizer, out)
    return out


def save_preprocessing(tokenizer: PreTrainedTokenizerBase, out: Path) -> None:
    """The tokenizer beside the weights; a vision-language model's whole processor (tokenizer, image
    processor, chat template), so `AutoProcessor.from_pretrained(out)` loads it."""
    if tokenizer is not None:
        (processor_of(tokenizer) or tokenizer).save_pretrained(out)


def save_hf_copy(
    engine: DeepSpeedEngine,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: Path | None,
    extra_config: dict[str, Any] | None = None,
    rename: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    lora: LoraSave | None = None,
) -> None:
    """--save_hf_ckpt: an HF-format copy of the engine's model in `out_dir`, as the final commit would save it
    (None: this rank writes nothing). Collective: every rank calls (ZeRO-3 gathers)."""
    state = full_state_dict(engine)
    if out_dir is not None and state is not None:
        check_weights(state, f"the --save_hf_ckpt copy in {out_dir}")
        save_hf_model(engine.module, state, tokenizer, out_dir, extra_config, rename, lora)


def commit_model(
    out: StagedOutput,
    engine: DeepSpeedEngine,
    tokenizer: PreTrainedTokenizerBase,
    metadata: dict[str, Any],
    extra_config: dict[str, Any] | None = None,
    rename: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    lora: LoraSave | None = None,
    *,
    cfg: TrainingConfig,
) -> dict | None:
    """The one way a stage commits its model: gather the weights (collective: every rank calls),
    save them in HF format into `out.dir` beside whatever the stage put there (metrics, curves),
    with the model card of the stage's config `cfg` (README.md: lineage, data, metrics), and
    commit `out`. Returns the manifest on the rank that writes, None elsewhere."""
    state = full_state_dict(engine)
    if out.dir is None:
        return None
    check_weights(state, f"--save_path {out.save_path}")  # a NaN is never committed
    save_hf_model(engine.module, state, tokenizer, out.dir, extra_config, rename, lora)
    write_card(out.dir, cfg, metadata)  # after the weights (PEFT writes a README.md of its own), before MANIFEST
    return out.commit(metadata)


def save_value_model(
    engine: DeepSpeedEngine, tokenizer: PreTrainedTokenizerBase, out_dir: Path | None, value_head_prefix: str
) -> None:
    """A critic (or any value model) as a reward-model folder, loadable as alignflow's RMs are (the value head
    under `value_head_prefix`). Collective: every rank gathers; the rank with an `out_dir` writes."""
    state = full_state_dict(engine)
    if out_dir is None:
        return
    check_weights(state, f"the critic for {out_dir}")
    save_hf_model(
        engine.module,
        state,
        tokenizer,
        out_dir,
        {"value_head_prefix": value_head_prefix},
        lambda st: export_names(st, value_head_prefix),
    )
