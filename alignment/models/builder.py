"""Everything a trainer needs before training: precision, attention, tokenizer, model, LoRA."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import enable_full_determinism

from alignment.config import TrainingConfig
from alignment.config.engine_knobs import EngineKnobsConfig
from alignment.config.groups import LoraConfig
from alignment.config.model import ModelConfig
from alignment.config.preference import RMConfig
from alignment.config.rewards import RewardSourceConfig
from alignment.config.vision import VisionDataConfig
from alignment.datasets.images import processor_of
from alignment.distributed.runtime import Runtime
from alignment.models.kind import VisionModelError
from alignment.models.loading import (
    ModelLoadError,
    check_4bit,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
    use_modelscope_hub,
)
from alignment.models.lora import apply_lora, check_targets
from alignment.models.precision import (
    Precision,
    apply_liger,
    attn_implementation,
    check_cuda_knobs,
    check_ring_attention,
    precision_for,
)
from alignment.models.reward_model import load_reward_model
from alignment.models.vision import freeze_visual_encoder

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass
class ModelSetup:
    path: str  # local directory (or hub name) the weights come from
    precision: Precision
    attn: str  # "sdpa" | "flash_attention_2" | "eager"
    tokenizer: PreTrainedTokenizerBase
    trust_remote_code: bool = False  # --trust_remote_code, for every load of this model
    experts: str | None = None  # --experts_implementation, for the models a stage trains

    @property
    def packed_mask_dtype(self) -> torch.dtype | None:
        """flash-attention reads packing from position ids; SDPA takes a bool block mask."""
        return None if self.attn == "flash_attention_2" else torch.bool

    def causal_lm(self, load_in_4bit: bool = False) -> torch.nn.Module:
        """This model as a causal LM, at its precision and attention."""
        trust = self.trust_remote_code
        return load_causal_lm(
            self.path, self.precision.dtype, self.attn, load_in_4bit=load_in_4bit, trust_remote_code=trust
        )


def tokenizer_for(cfg: ModelConfig) -> tuple[str, PreTrainedTokenizerBase]:
    """The model's resolved path and its tokenizer (or processor), as every rank and a Ray driver load them."""
    path = resolve_model_path(cfg.model.model_name_or_path, revision=cfg.model.revision)
    tok = load_tokenizer(
        path,
        cfg.data.tokenizer_chat_template,
        use_fast=not cfg.data.disable_fast_tokenizer,
        trust_remote_code=cfg.model.trust_remote_code,
    )
    return path, tok


def prepare(cfg: ModelConfig, rt: Runtime) -> ModelSetup:
    """Cheap checks and the tokenizer: everything that can fail before weights are loaded."""
    precision = precision_for(cfg.ds.bf16, rt.device)
    attn = attn_implementation(cfg.attention(), rt.device)
    check_4bit(cfg.ds.load_in_4bit, rt.device)
    check_ring_attention(cfg.ds.ring_attn_size, rt.device)
    use_modelscope_hub(cfg.model.use_ms)
    if isinstance(cfg, EngineKnobsConfig):
        check_cuda_knobs(cfg.ds, rt.device)
        knob_effects(cfg)
    path, tok = tokenizer_for(cfg)
    trust = cfg.model.trust_remote_code
    if isinstance(cfg, VisionDataConfig) and cfg.with_images and processor_of(tok) is None:
        raise VisionModelError(
            f"--max_images_per_prompt {cfg.data.max_images_per_prompt}: --pretrain {cfg.model.model_name_or_path} "
            f"is a text-only model (its config has no vision_config); pass a vision-language model, or "
            f"--max_images_per_prompt 0 for text"
        )
    if isinstance(cfg, LoraConfig) and cfg.ds.lora.rank > 0:
        head = (cfg.ds.value_head_prefix,) if isinstance(cfg, (RMConfig, RewardSourceConfig)) else ()
        check_targets(path, cfg.ds.lora.target_modules, extra=head, trust_remote_code=trust)
    return ModelSetup(path, precision, attn, tok, trust, cfg.ds.experts_implementation)


def knob_effects(cfg: EngineKnobsConfig) -> None:
    """The run-wide effects of OpenRLHF's knobs: --full_determinism_enable (transformers'
    enable_full_determinism, before any weights are built), and the one line --dataloader_num_workers gets."""
    if cfg.train.full_determinism_enable:
        enable_full_determinism(cfg.train.seed)
        log.info("--full_determinism_enable: deterministic algorithms on, seeded from --seed %d", cfg.train.seed)
    if cfg.data.dataloader_num_workers:
        log.info(
            "--dataloader_num_workers %d: no effect here; rows are tokenized ahead (--dataset_num_proc) and "
            "collated in the training process",
            cfg.data.dataloader_num_workers,
        )


def set_experts(model: torch.nn.Module, experts: str | None) -> None:
    """--experts_implementation: how the model's mixture-of-experts layers compute (a dense model has none to set);
    a model transformers cannot set it on is one line."""
    if experts is None:
        return
    try:
        model.set_experts_implementation(experts)
    except ValueError as e:
        raise ModelLoadError(f"--experts_implementation {experts}: {e}") from None


def seed_init(seed: int) -> None:
    """Seed the RNGs that initialise fresh weights (a reward head, LoRA adapters), so a run and
    its resumed twin build the same model before the checkpoint overwrites it, and runs repeat."""
    random.seed(seed)
    torch.manual_seed(seed)


def load_actor(setup: ModelSetup, cfg: TrainingConfig) -> torch.nn.Module:
    seed_init(cfg.train.seed)
    model = setup.causal_lm(cfg.ds.load_in_4bit)
    if isinstance(cfg, VisionDataConfig) and cfg.frozen_visual_encoder():
        log.info("--freeze_visual_encoder: %d tensors of the image encoder frozen", freeze_visual_encoder(model))
    if cfg.ds.use_liger_kernel:
        model = apply_liger(model)
    set_experts(model, setup.experts)
    return _for_training(model, cfg, "CAUSAL_LM")


def load_value_model(setup: ModelSetup, cfg: TrainingConfig) -> torch.nn.Module:
    """Reward / critic model: backbone from --pretrain plus a scalar head (fresh when --pretrain is an LM)."""

    seed_init(cfg.train.seed)
    model = load_reward_model(
        setup.path,
        setup.precision.dtype,
        setup.attn,
        setup.tokenizer.pad_token_id,
        load_in_4bit=cfg.ds.load_in_4bit,
        trust_remote_code=setup.trust_remote_code,
    )
    set_experts(model, setup.experts)
    return _for_training(model, cfg, "SEQ_CLS")


def _for_training(model: torch.nn.Module, cfg: TrainingConfig, task: str) -> torch.nn.Module:
    model.config.use_cache = False
    if cfg.model.gradient_checkpointing_enable:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": cfg.model.gradient_checkpointing_reentrant}
        )
        if cfg.ds.lora.rank > 0:
            model.enable_input_require_grads()  # LoRA + checkpointing needs grads at the inputs
    return apply_lora(model, cfg.ds.lora.rank, cfg.ds.lora.alpha, cfg.ds.lora.dropout, cfg.ds.lora.target_modules, task)
