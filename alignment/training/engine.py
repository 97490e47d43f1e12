"""Wrap a model into a DeepSpeed engine with our optimizer and schedule."""

from __future__ import annotations

import ctypes
import logging
import math
import os
import re
from typing import TYPE_CHECKING, Any, Callable

import deepspeed
import torch
from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
from transformers import get_scheduler

from alignment.config.base import ConfigError
from alignment.config.runs import Train, TrainConfig, TrainDS
from alignment.distributed.deepspeed_config import train_ds_config
from alignment.distributed.runtime import Runtime
from alignment.models.moe import mark_zero3_leaves

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from torch.optim.lr_scheduler import LRScheduler

log = logging.getLogger(__name__)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""

    return getattr(ctypes.CDLL(None), "malloc_trim", None)


_TRIM = _malloc_trim()


def step(engine: DeepSpeedEngine) -> bool:
    """engine.step(); after an optimizer update on CPU, hand the heap's free pages back to the OS.
    A step's activations are freed at its end, but glibc keeps most of those pages in its heap
    (torch's CPU allocator has no cache of its own), so a CPU rank's resident memory climbed
    100-200 MB above what it uses. On the 25 M benchmark model's SFT, trimming at each update
    brought the peak RSS from 1,499-1,601 MB to 1,368-1,415 MB (TRL: 1,371-1,446 MB; docs/sft.md).
    Returns whether this was an optimizer update (an accumulation boundary)."""
    update = engine.is_gradient_accumulation_boundary()
    engine.step()
    if update and _TRIM is not None and next(engine.module.parameters()).device.type == "cpu":
        _TRIM(0)
    return update


def adam_class(ds: TrainDS, device: str) -> tuple[type, dict[str, Any]]:
    """The AdamW implementation for this device (and its extra arguments)."""
    if ds.adam_offload:
        return DeepSpeedCPUAdam, {}
    if device == "cuda":
        name_this_gpu_arch()
        return FusedAdam, {}
    # fused: one kernel over all parameters instead of a chain of foreach ops (~4x less optimizer time on CPU);
    # same math and the same state_dict, so checkpoints load either way
    return torch.optim.AdamW, {"fused": device == "cpu"}


# a parameter of the repeated blocks: model.layers.3.mlp.up_proj.weight, transformer.h.0.attn.c_attn.weight
_IN_BLOCK = re.compile(r"\.\d+\.")


def muon_param(name: str, param: torch.nn.Parameter) -> bool:
    """Muon orthogonalises matrix updates: it is meant for the hidden 2-D weights of the transformer blocks.
    Embeddings, the LM and value heads, norms and biases stay on AdamW (Muon's authors' split). A name
    without a block index is outside the blocks; DeepSpeed's own split (by the words embed and lm_head)
    would put a reward model's or critic's value head on Muon."""
    return param.ndim == 2 and _IN_BLOCK.search(name) is not None


def make_optimizer(
    named: list[tuple[str, torch.nn.Parameter]], cfg: TrainConfig, device: str, lr: float
) -> torch.optim.Optimizer:
    """AdamW (--optim adam) or DeepSpeed's Muon with an auxiliary AdamW (--optim muon), on the trainable
    parameters `named` [(name, parameter)], at peak learning rate `lr` (the model's: --learning_rate, or
    PPO's --actor_learning_rate / --critic_learning_rate)."""
    adam, extra = adam_class(cfg.ds, device)
    betas = tuple(cfg.adam.betas)
    params = [p for _, p in named]
    if cfg.train.optim == "adam":
        return adam(params, lr=lr, betas=betas, eps=cfg.adam.eps, weight_decay=cfg.adam.weight_decay, **extra)
    # imported here, as DeepSpeed's engine does: the module sets up torch.compile'd kernels
    from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam

    muon = [p for n, p in named if muon_param(n, p)]
    rest = [p for n, p in named if not muon_param(n, p)]
    for group, flag in ((muon, True), (rest, False)):
        for p in group:
            p.use_muon = flag  # DeepSpeed's ZeRO optimizers read the tag on the parameter
    if not muon:
        raise ConfigError(
            "--optim muon: no trainable 2-D weight inside the model's blocks for Muon to update "
            "(all trainable parameters are embeddings, heads, norms or biases): use --optim adam"
        )
    log.info("--optim muon: Muon on %d block matrices, AdamW on %d other tensors", len(muon), len(rest))
    groups = [
        {
            "params": muon,
            "use_muon": True,
            "lr": cfg.muon.lr or lr,
            "momentum": cfg.muon.momentum,
            "weight_decay": cfg.adam.weight_decay,
        }
    ]
    if rest:
        groups.append(
            {
                "params": rest,
                "use_muon": False,
                "lr": lr,
                "betas": betas,
                "eps": cfg.adam.eps,
                "weight_decay": cfg.adam.weight_decay,
            }
        )
    return MuonWithAuxAdam(groups, adam_optimizer=adam, adam_optimizer_kwargs=extra)


def name_this_gpu_arch() -> None:
    """DeepSpeed JIT-compiles FusedAdam at first use and reads the target architectures from
    TORCH_CUDA_ARCH_LIST, else from torch's own list, as numbers; torch 2.11's list names `9.0a` on an
    H100, which DeepSpeed 0.19.8 cannot parse (ValueError: invalid literal for int(): '0a'; seen on a
    lent H100, 2026-11-26, and again from a TORCH_CUDA_ARCH_LIST="...9.0a" set by the machine's image,
    2026-11-27). Unset: this GPU's capability, as the JIT build would target; set: its arch-specific
    suffixes dropped (FusedAdam uses no sm_90a-only instructions)."""
    given = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if given is None:
        major, minor = torch.cuda.get_device_capability()
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    else:
        os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(given)


def deepspeed_arch_list(value: str) -> str:
    """TORCH_CUDA_ARCH_LIST as DeepSpeed's builder parses it: `9.0a` -> `9.0` (`+PTX` kept)."""
    return re.sub(r"(\d+\.\d+)[a-z]+", r"\1", value)


def make_scheduler(optimizer: torch.optim.Optimizer, train: Train, total_steps: int) -> LRScheduler:
    warmup = math.ceil(total_steps * train.lr_warmup_ratio)
    # the ratio itself, not --learning_rate x it: Muon keeps no optimizer-wide default lr to divide by
    extra = {"min_lr_rate": train.min_lr_ratio} if train.lr_scheduler == "cosine_with_min_lr" else None
    return get_scheduler(
        train.lr_scheduler,
        optimizer,
        num_warmup_steps=warmup,
        num_training_steps=max(1, total_steps),
        scheduler_specific_kwargs=extra,
    )


def build_engine(
    model: torch.nn.Module, cfg: TrainConfig, rt: Runtime, bf16: bool, total_steps: int, lr: float
) -> DeepSpeedEngine:
    """The model's DeepSpeed engine: ZeRO stage, optimizer at peak learning rate `lr`, schedule."""

    stage = cfg.zero_stage_on(rt.dp_size)
    if cfg.ds.zero_stage is None:
        log.info(
            "ZeRO stage %d (--zero_stage unset: %s)",
            stage,
            "one rank, nothing to partition; --zero_stage 2 gives ZeRO-2's copies"
            if stage == 0
            else "the default on several ranks or with --adam_offload",
        )
    if stage == 3:
        mark_zero3_leaves(model)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizer = make_optimizer(named, cfg, rt.device, lr)
    scheduler = make_scheduler(optimizer, cfg.train, total_steps)
    ds_config = train_ds_config(cfg, rt.dp_size, bf16, rt.device, rt.tp)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    if stage == 0 and rt.world_size == 1:
        # Stage 0's all-reduce flattens every gradient into a buffer and copies it back even with no
        # other rank to reduce with: a transient copy of all gradients at each step's end. One rank
        # has nothing to reduce, so it skips it (the same losses; its share of the peak was lost in
        # the run-to-run spread of the RSS that step() above fixes).
        engine.enable_backward_allreduce = False
    return engine
