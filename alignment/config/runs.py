"""Groups shared by the stages about how a run runs: its ranks on the cluster (`ranks`), the optimizer and
its schedule (`train`, `adam`, `muon`), MoE's auxiliary loss (checkpoints: config/checkpoints.py; logging:
config/tracking.py).

Each group is declared beside the class whose `check_<concern>()` checks it; a stage's `validate()` runs them
all, before any model or dataset is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.engine_knobs import EngineKnobsConfig
from alignment.config.groups import LoraConfig

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class Ranks:
    """`ranks` settings; RanksConfig checks them."""

    num_nodes: int = opt(
        1, "Nodes of the stage's rank group on Ray (OpenRLHF's name); ranks = this x --num_gpus_per_node"
    )
    num_gpus_per_node: int = opt(1, "Ranks per node on Ray: one GPU each, or one CPU each (gloo) on a CPU-only cluster")
    placement_strategy: str = opt(
        "PACK",
        "Ray placement-group strategy of the ranks (SPREAD: one node per rank where possible)",
        choices=PLACEMENT_STRATEGIES,
        identity=False,
    )
    accelerator_type: Optional[str] = opt(
        None,
        "Only place ranks on nodes with this Ray accelerator type (e.g. H100); "
        "refused in one line when the cluster has none",
        identity=False,
    )


class RanksConfig:
    """Where the stage's ranks go on a Ray cluster (alignment.distributed.ray_ranks). Under
    torchrun/deepspeed the launcher sets the world size and these must be left at 1 or match it."""

    def world_size(self) -> int:
        return self.ranks.num_nodes * self.ranks.num_gpus_per_node

    def ranks_flags(self) -> str:
        """How the rank count was asked for, for messages."""
        return f"--num_nodes {self.ranks.num_nodes} x --num_gpus_per_node {self.ranks.num_gpus_per_node}"

    def check_ranks(self) -> None:
        require(
            self.ranks.num_nodes >= 1 and self.ranks.num_gpus_per_node >= 1,
            f"--num_nodes {self.ranks.num_nodes} / --num_gpus_per_node "
            f"{self.ranks.num_gpus_per_node}: both must be >= 1",
        )


@dataclass(frozen=True)
class Train:
    """`train` settings; TrainConfig checks them."""

    micro_batch_size: int = opt(
        8,
        "Samples (or packed rows) per rank per forward/backward",
        dotted="train.micro_batch_size",
        flat="micro_train_batch_size",
    )
    batch_size: int = opt(
        128,
        "Global batch per optimizer step; accumulation = this / (micro * world size)",
        dotted="train.batch_size",
        flat="train_batch_size",
    )
    max_epochs: int = opt(1, "Passes over the training data", dotted="train.max_epochs")
    max_steps: int = opt(-1, "Stop after this many optimizer steps (-1: run all epochs)")
    lr_warmup_ratio: float = opt(
        0.03,
        "Fraction of steps for linear warm-up",
        dotted={"ppo": ("actor.lr_warmup_ratio", "critic.lr_warmup_ratio")},
    )
    lr_scheduler: str = opt(
        "cosine_with_min_lr",
        "Schedule after warm-up",
        choices=("cosine_with_min_lr", "cosine", "linear", "constant", "constant_with_warmup"),
        dotted={"ppo": ("actor.lr_scheduler", "critic.lr_scheduler")},
    )
    min_lr_ratio: float = opt(
        0.1,
        "cosine_with_min_lr decays to learning_rate * this",
        dotted={"ppo": ("actor.min_lr_ratio", "critic.min_lr_ratio")},
    )
    optim: str = opt(
        "adam",
        "Optimizer: adam (AdamW) or muon (DeepSpeed's Muon on the 2-D weights inside the "
        "transformer blocks, AdamW with --adam_betas on embeddings, heads, norms and biases; "
        "both at --learning_rate unless --muon_lr)",
        choices=("adam", "muon"),
        dotted={"ppo": ("actor.optim", "critic.optim")},
    )
    max_norm: float = opt(1.0, "Gradient clipping norm", dotted={"ppo": ("actor.max_norm", "critic.max_norm")})
    max_nonfinite_skips: int = opt(
        0,
        "Micro-batches whose loss is NaN/Inf to skip before the stage stops (0: stop at "
        "the first; the PPO family counts per iteration). A NaN/Inf gradient norm or "
        "weight always stops it, uncommitted",
    )
    seed: int = opt(42, "Random seed (data order, init, dropout)", dotted="train.seed")
    local_rank: int = opt(-1, "Set by the deepspeed launcher", identity=False)
    num_threads: int = opt(0, "CPU threads per rank (0: cores / ranks on this node)", identity=False)


@dataclass(frozen=True)
class Adam:
    """`adam` settings; TrainConfig checks them."""

    lr: float = opt(5e-6, "Peak learning rate", dotted={"": "adam.lr", "ppo": ()}, flat="learning_rate")
    betas: list[float] = opt(
        [0.9, 0.95],
        "Adam betas",
        dotted={"": "adam.betas", "ppo": ("actor.adam.betas", "critic.adam.betas")},
        flat="adam_betas",
    )
    eps: float = opt(
        1e-8, "Adam epsilon", dotted={"": "adam.eps", "ppo": ("actor.adam.eps", "critic.adam.eps")}, flat="adam_eps"
    )
    weight_decay: float = opt(
        0.0,
        "Weight decay",
        dotted={"": "adam.weight_decay", "ppo": ("actor.adam.weight_decay", "critic.adam.weight_decay")},
        flat="l2",
    )


@dataclass(frozen=True)
class Muon:
    """`muon` settings; TrainConfig checks them."""

    lr: Optional[float] = opt(
        None,
        "--optim muon: peak learning rate of the Muon half (default: --learning_rate; OpenRLHF's: 0.02). "
        "Muon's orthogonalised updates move each weight ~1/sqrt(width) as much as "
        "AdamW's at the same rate, so it usually wants a larger one",
        dotted={"": "muon.lr", "ppo": ("actor.muon.lr", "critic.muon.lr")},
        flat="muon_lr",
    )
    momentum: float = opt(
        0.95,
        "--optim muon: the Muon half's momentum",
        dotted={"": "muon.momentum", "ppo": ("actor.muon.momentum", "critic.muon.momentum")},
        flat="muon_momentum",
    )
    ns_steps: int = opt(
        5,
        "--optim muon: Newton-Schulz iterations. DeepSpeed's Muon runs 5; another value is refused",
        dotted={"": "muon.ns_steps", "ppo": ("actor.muon.ns_steps", "critic.muon.ns_steps")},
        flat="muon_ns_steps",
    )
    nesterov: bool = opt(
        True,
        "--optim muon: Nesterov momentum. DeepSpeed's Muon always uses it; false is refused",
        dotted={"": "muon.nesterov", "ppo": ("actor.muon.nesterov", "critic.muon.nesterov")},
        flat="muon_nesterov",
    )
    no_nesterov: bool = opt(
        False,
        "OpenRLHF's switch for --muon_nesterov false: refused, as that is",
        dotted={"": "muon.no_nesterov", "ppo": ("actor.muon.no_nesterov", "critic.muon.no_nesterov")},
        flat="muon_no_nesterov",
    )


@dataclass(frozen=True)
class TrainDS:
    """`ds` settings; TrainConfig checks them."""

    zero_stage: Optional[int] = opt(
        None,
        "DeepSpeed ZeRO stage. Unset: 2, or 0 on a single rank without --adam_offload "
        "(ZeRO-1/2 on one rank partition nothing and only copy the weights and "
        "gradients: SmolLM2-135M peak RSS 5.2 -> 3.5 GB, docs/benchmarks.md)",
        choices=(0, 1, 2, 3),
        dotted="ds.zero_stage",
    )
    adam_offload: bool = opt(
        False, "Keep optimizer states on CPU (DeepSpeedCPUAdam; needs --zero_stage 1-3)", dotted="ds.adam_offload"
    )
    zpg: int = opt(1, "ZeRO++ hierarchical partition size", dotted="ds.zpg")


class TrainConfig(EngineKnobsConfig):
    """The checks of `Train` (`train`), `Adam` (`adam`), `Muon` (`muon`), `TrainDS` (`ds`): a stage's `validate()` runs
    them, before anything loads."""

    def check_train(self) -> None:
        require(self.train.micro_batch_size > 0, f"--micro_train_batch_size {self.train.micro_batch_size}: must be > 0")
        require(self.train.batch_size > 0, f"--train_batch_size {self.train.batch_size}: must be > 0")
        require(self.adam.lr > 0, f"--learning_rate {self.adam.lr}: must be > 0")
        require(
            0.0 <= self.train.lr_warmup_ratio < 1.0,
            f"--lr_warmup_ratio {self.train.lr_warmup_ratio}: must be in [0, 1)",
        )
        require(self.train.max_epochs > 0, f"--max_epochs {self.train.max_epochs}: must be > 0")
        require(
            self.train.max_steps == -1 or self.train.max_steps > 0,
            f"--max_steps {self.train.max_steps}: use -1 (run all "
            f"--max_epochs) or a positive number of optimizer steps",
        )
        require(self.adam.weight_decay >= 0, f"--l2 {self.adam.weight_decay}: weight decay must be >= 0 (0: none)")
        require(
            self.train.max_nonfinite_skips >= 0, f"--max_nonfinite_skips {self.train.max_nonfinite_skips}: must be >= 0"
        )
        # a skipped micro-batch backs up a zero built from the parameters; ZeRO-3's are partitioned placeholders
        require(
            not (self.train.max_nonfinite_skips and self.ds.zero_stage == 3),
            "--max_nonfinite_skips with --zero_stage 3 is not supported: use --zero_stage 0-2 or drop the flag",
        )
        # measured with DeepSpeed 0.19.8: ZeRO-3 under AutoTP counts the batch over other ranks than ZeRO 0-2
        require(
            not (self.ds.tensor_parallel_size > 1 and self.ds.zero_stage == 3),
            f"--ds_tensor_parallel_size {self.ds.tensor_parallel_size} with --zero_stage 3: DeepSpeed's AutoTP "
            f"trains under ZeRO 0-2; use --zero_stage 1 or 2 (the tensor-parallel shards already split the weights)",
        )
        # measured: DeepSpeed 0.19.8 replaces PEFT's adapted layers under the optimizer (KeyError in ZeRO's setup)
        require(
            not (self.ds.tensor_parallel_size > 1 and isinstance(self, LoraConfig) and self.ds.lora.rank > 0),
            f"--lora_rank with --ds_tensor_parallel_size {self.ds.tensor_parallel_size}: DeepSpeed's AutoTP does not "
            f"shard PEFT's LoRA layers; train the adapters with --ds_tensor_parallel_size 1 (ZeRO spreads the rest)",
        )
        require(len(self.adam.betas) == 2, f"--adam_betas needs two values, got {self.adam.betas}")
        require(self.adam.eps > 0, f"--adam_eps {self.adam.eps}: must be > 0 (e.g. 1e-8)")
        # DeepSpeed's Muon (the optimizer behind --optim muon) fixes these two; OpenRLHF warns and goes on
        require(
            self.muon.ns_steps == 5 and self.muon.nesterov and not self.muon.no_nesterov,
            "--muon_ns_steps / --muon_nesterov: DeepSpeed's Muon always runs 5 Newton-Schulz steps with Nesterov "
            "momentum; drop the flag (another value would be accepted and not used)",
        )
        require(0 <= self.muon.momentum < 1, f"--muon_momentum {self.muon.momentum}: must be in [0, 1)")
        if self.muon.momentum != 0.95:
            require(
                self.train.optim == "muon",
                "--muon_momentum sets the Muon half of --optim muon: add --optim muon or drop it",
            )
        if self.muon.lr is not None:
            require(
                self.train.optim == "muon",
                f"--muon_lr {self.muon.lr} sets the Muon half of --optim muon: add --optim muon or drop --muon_lr",
            )
            require(self.muon.lr > 0, f"--muon_lr {self.muon.lr}: must be > 0")
        require(
            not (self.ds.adam_offload and self.ds.zero_stage == 0),
            "--adam_offload with --zero_stage 0: DeepSpeed offloads optimizer states only under ZeRO; "
            "use --zero_stage 1, 2 or 3, or drop --adam_offload",
        )

    def zero_stage_on(self, world_size: int) -> int:
        """The ZeRO stage an engine of `world_size` ranks runs: --zero_stage as given, else the automatic one."""
        if self.ds.zero_stage is not None:
            return self.ds.zero_stage
        return 0 if world_size == 1 and not self.ds.adam_offload else 2

    def accumulation_steps(self, world_size: int) -> int:
        per_step = self.train.micro_batch_size * world_size
        require(
            self.train.batch_size % per_step == 0,
            f"--train_batch_size {self.train.batch_size} is not divisible by --micro_train_batch_size "
            f"{self.train.micro_batch_size} x world size {world_size} = {per_step}: "
            f"use a multiple of {per_step}, e.g. {max(per_step, self.train.batch_size // per_step * per_step)}",
        )
        return self.train.batch_size // per_step


@dataclass(frozen=True)
class MoE:
    """`model` settings; MoEConfig checks them."""

    aux_loss_coef: float = opt(
        0.0,
        "MoE router load-balancing loss weight (sparse-MoE models such as Mixtral; 0: off)",
        dotted={"": "model.aux_loss_coef", "ppo": "actor.aux_loss_coef"},
    )


class MoEConfig:
    """The checks of `MoE` (`model`): a stage's `validate()` runs them, before anything loads."""

    def check_moe(self) -> None:
        require(
            self.model.aux_loss_coef >= 0, f"--aux_loss_coef {self.model.aux_loss_coef}: must be >= 0 (0 turns it off)"
        )
