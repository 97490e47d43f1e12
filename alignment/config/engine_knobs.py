"""OpenRLHF v0.11's DeepSpeed and data knobs (`--ds.*`, `--data.dataloader_num_workers`,
`--train.full_determinism_enable`). Each one either changes what runs (it goes into DeepSpeed's config, the
model load or the RNG setup) or, where this machine lacks what it needs, is refused in one line naming it.
Part of every training stage's TrainConfig."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require


@dataclass(frozen=True)
class EngineKnobs:
    """`ds` settings; EngineKnobsConfig checks them."""

    overlap_comm: bool = opt(
        False, "DeepSpeed ZeRO: overlap gradient reduction with the backward pass", dotted="ds.overlap_comm"
    )
    grad_accum_dtype: Optional[str] = opt(
        None,
        "DeepSpeed: the dtype gradients are accumulated in across micro-batches (unset: DeepSpeed's choice)",
        choices=("fp32", "bf16", "fp16"),
        dotted="ds.grad_accum_dtype",
    )
    use_universal_ckpt: bool = opt(
        False,
        "Resume from a DeepSpeed universal checkpoint (converted with ds_to_universal.py: a run on another "
        "number of ranks); DeepSpeed's checkpoint.load_universal",
        dotted="ds.use_universal_ckpt",
    )
    deepcompile: bool = opt(False, "DeepSpeed's DeepCompile (compiled ZeRO); needs CUDA GPUs", dotted="ds.deepcompile")
    use_liger_kernel: bool = opt(
        False,
        "Liger's Triton kernels for the model's layers and loss; needs CUDA GPUs and liger-kernel",
        dotted="ds.use_liger_kernel",
    )
    tensor_parallel_size: int = opt(
        1,
        "DeepSpeed AutoTP: split each layer's weights over this many consecutive ranks, which then see the same "
        "batches (1: off); --train_batch_size counts data-parallel replicas, as in OpenRLHF",
        dotted="ds.tensor_parallel_size",
        flat="ds_tensor_parallel_size",
    )


@dataclass(frozen=True)
class EngineKnobsTrain:
    """`train` settings; EngineKnobsConfig checks them."""

    full_determinism_enable: bool = opt(
        False,
        "Deterministic kernels everywhere (transformers' enable_full_determinism: torch's deterministic "
        "algorithms, cuBLAS workspace, seeded RNGs); slower",
        dotted="train.full_determinism_enable",
        flat="full_determinism",
    )


@dataclass(frozen=True)
class EngineKnobsData:
    """`data` settings; EngineKnobsConfig checks them."""

    dataloader_num_workers: int = opt(
        0,
        "OpenRLHF's DataLoader workers. Rows are tokenized ahead into 🤗 datasets' cache (--dataset_num_proc "
        "processes) and batches are collated in the training process, so there is no loader to give workers: "
        "a value above 0 says so once in the log",
        identity=False,
        dotted="data.dataloader_num_workers",
    )


class EngineKnobsConfig:
    """The checks of `EngineKnobs` (`ds`), `EngineKnobsTrain` (`train`), `EngineKnobsData` (`data`): a stage's
    `validate()` runs them, before anything loads."""

    def check_engine_knobs(self) -> None:
        require(
            self.data.dataloader_num_workers >= 0,
            f"--dataloader_num_workers {self.data.dataloader_num_workers}: must be >= 0",
        )
        require(
            self.ds.tensor_parallel_size >= 1,
            f"--ds_tensor_parallel_size {self.ds.tensor_parallel_size}: must be >= 1 (1: no tensor parallelism)",
        )
