"""What SFT, RM, DPO and KTO do before their model loads, in one order: ranks, sizes, tokenizer,
data, step count. Each step can fail on bad input, and all of them fail before any weights load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from alignment.config import TrainerConfig
from alignment.config.runs import MoEConfig
from alignment.datasets.tokenized import RowTokenizer, load_train_eval
from alignment.distributed.runtime import Runtime, init_runtime
from alignment.models.builder import ModelSetup, prepare
from alignment.models.moe import moe_top_k
from alignment.trainers.base import Trainer, total_steps
from alignment.training.engine import build_engine
from alignment.training.resume_point import check_world_size
from alignment.training.run_identity import RunIdentity

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

TrainerT = TypeVar("TrainerT", bound=Trainer)


@dataclass
class Started:
    rt: Runtime
    setup: ModelSetup
    train_set: list
    eval_set: list | None
    steps: int  # optimizer steps the run will take
    moe_top_k: int  # experts per token for --aux_loss_coef (0: off, or a stage without MoE flags)

    def counts(self, unit: str = "samples") -> str:
        """The line every trainer logs first (its own figures follow)."""
        return (
            f"{len(self.train_set)} train {unit}, {len(self.eval_set or [])} eval, {self.steps} optimizer steps, "
            f"world size {self.rt.world_size}{self.tp_label()}, {self.setup.precision.label}, "
            f"attention={self.setup.attn}"
        )

    def tp_label(self) -> str:
        rt = self.rt
        return f" (tensor-parallel groups of {rt.tp}, {rt.dp_size} data-parallel)" if rt.tp > 1 else ""

    def trainer(self, cls: type[TrainerT], cfg: TrainerConfig, model: torch.nn.Module, **extra: Any) -> TrainerT:
        """The stage's trainer `cls` over a DeepSpeed engine of `model`, on the ranks, tokenizer and data start()
        gathered; `extra`: the trainer's own arguments (a reference, a teacher, the packing mask's dtype)."""
        engine = build_engine(model, cfg, self.rt, self.setup.precision.bf16, self.steps, cfg.adam.lr)
        return cls(cfg, self.rt, engine, self.setup.tokenizer, self.train_set, self.eval_set, **extra)


def start(cfg: TrainerConfig, tokenizer_for: Callable[[PreTrainedTokenizerBase, str], RowTokenizer]) -> Started:
    """`tokenizer_for(tokenizer, source)` turns one dataset source's rows into the stage's samples."""
    rt = init_runtime(cfg.train.local_rank, cfg.train.num_threads).tensor_parallel(cfg.ds.tensor_parallel_size)
    cfg.accumulation_steps(rt.dp_size)  # fails now, not after loading, if sizes don't divide
    if cfg.ckpt.load_enable:  # before any weights load
        check_world_size(cfg.ckpt.path, rt.world_size, RunIdentity.of(cfg))
    setup = prepare(cfg, rt)
    # a dense model given --aux_loss_coef is refused from its config.json, before the data is read
    top_k = moe_top_k(setup.path, cfg.model.aux_loss_coef, setup.trust_remote_code) if isinstance(cfg, MoEConfig) else 0
    train_set, eval_set = load_train_eval(cfg, lambda source: tokenizer_for(setup.tokenizer, source))
    return Started(rt, setup, train_set, eval_set, total_steps(len(train_set), cfg, rt.dp_size), top_k)
