"""DeepSpeed config dicts built from the typed train config (nothing else writes them)."""

from __future__ import annotations

from typing import Any

from alignment.config.runs import TrainConfig


def train_ds_config(cfg: TrainConfig, dp_size: int, bf16: bool, device: str, tp: int = 1) -> dict[str, Any]:
    """ZeRO stage, offload, batch sizes and clipping for a training engine of `dp_size` data-parallel replicas
    of `tp` ranks each (--ds_tensor_parallel_size: DeepSpeed's AutoTP shards each layer over a replica's ranks).

    The optimizer and scheduler are built by the trainer (so their state is ours to checkpoint
    and the schedule is exactly the one we document); DeepSpeed wraps them.
    """
    stage = cfg.zero_stage_on(dp_size)
    zero: dict[str, Any] = {
        "stage": stage,
        "offload_param": {"device": "none"},
        "offload_optimizer": {"device": "cpu" if cfg.ds.adam_offload else "none", "pin_memory": device == "cuda"},
    }
    if cfg.ds.overlap_comm:
        zero["overlap_comm"] = True
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
        if device == "cpu":
            # 0: really partition every parameter, even a tiny model's (by default DeepSpeed
            # keeps small ones whole, which would make ZeRO-3 on a test model a no-op).
            zero["stage3_param_persistence_threshold"] = 0
        if cfg.ds.zpg > 1:
            zero["zero_hpz_partition_size"] = cfg.ds.zpg
        if cfg.train.optim == "muon":
            zero["reduce_scatter"] = False  # DeepSpeed's ZeRO-3 refuses Muon with it (Muon needs whole gradients)
    knobs: dict[str, Any] = {}
    if cfg.ds.grad_accum_dtype:
        knobs["data_types"] = {"grad_accum_dtype": cfg.ds.grad_accum_dtype}
    if cfg.ds.use_universal_ckpt:
        knobs["checkpoint"] = {"load_universal": True}
    if cfg.ds.deepcompile:  # refused before this on machines without CUDA (models/builder.prepare)
        knobs["compile"] = {"deepcompile": True}
    if tp > 1:
        # full-vocabulary logits: our losses read log-probs of whole rows (DeepSpeed would shard a tied head's)
        knobs["tensor_parallel"] = {"autotp_size": tp, "vocab_parallel_lm_head": False}
    return knobs | {
        # DeepSpeed checks train = micro x accumulation x *all* ranks: a replica's tp ranks count tp times
        "train_batch_size": cfg.train.batch_size * tp,
        "train_micro_batch_size_per_gpu": cfg.train.micro_batch_size,
        "gradient_accumulation_steps": cfg.accumulation_steps(dp_size),
        "gradient_clipping": cfg.train.max_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,  # we log ourselves
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
        # --optim muon hands DeepSpeed its Muon with a DeepSpeedCPUAdam for the AdamW half under
        # --adam_offload; DeepSpeed would refuse any offloaded optimizer that is not a CPU Adam itself
        "zero_force_ds_cpu_optimizer": cfg.train.optim != "muon",
    }
