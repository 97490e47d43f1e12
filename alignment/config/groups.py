"""Flag groups shared by the stages. Names are OpenRLHF's flat flag names.

Each group checks its own values in `check_<group>()`; a stage's `validate()` runs them all,
before any model or dataset is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import ConfigError, opt, require
from alignment.config.paths import check_checkpoint_folder


@dataclass
class ModelConfig:
    pretrain: Optional[str] = opt(
        None,
        "HF model directory, store URI (s3://...) or hub name to start from",
        path="model",
        dotted={"": "model.model_name_or_path", "ppo": "actor.model_name_or_path"},
    )
    trust_remote_code: bool = opt(
        False,
        "Let transformers run the model repo's own Python code (custom architectures); "
        "only for models whose code you trust",
    )
    revision: Optional[str] = opt(
        None,
        "Hub revision of --pretrain (branch, tag or commit sha) to pin; part of the "
        "stage identity, so a flow reruns the stage when it changes",
    )
    bf16: bool = opt(
        False,
        "Train in bfloat16. On CPUs without native bf16 the math runs in fp32 (logged once)",
        dotted="ds.param_dtype",
        dotted_values={"bf16": True},
    )
    flash_attn: bool = opt(
        False,
        "Use flash-attention 2; falls back to PyTorch SDPA (logged once) where flash-attn is missing",
        dotted="ds.attn_implementation",
        dotted_values={"flash_attention_2": True, "sdpa": False},
    )
    gradient_checkpointing: bool = opt(
        False,
        "Recompute activations in backward to save memory",
        dotted={"": "model.gradient_checkpointing_enable", "ppo": "actor.gradient_checkpointing_enable"},
    )
    gradient_checkpointing_use_reentrant: bool = opt(
        False,
        "Use the reentrant checkpointing variant",
        dotted={"": "model.gradient_checkpointing_reentrant", "ppo": "actor.gradient_checkpointing_reentrant"},
    )
    load_in_4bit: bool = opt(
        False, "QLoRA: load the base in 4 bit (needs bitsandbytes and a CUDA GPU)", dotted="ds.load_in_4bit"
    )
    disable_fast_tokenizer: bool = opt(False, "Use the slow (Python) tokenizer", dotted="data.disable_fast_tokenizer")
    tokenizer_chat_template: Optional[str] = opt(
        None, "Jinja chat template overriding the tokenizer's own", dotted="data.tokenizer_chat_template"
    )
    ring_attn_size: int = opt(
        1,
        "Ring attention: split each sequence across this many GPUs (1: off). Needs CUDA and ring-flash-attn",
        dotted="ds.ring_attn_size",
    )
    ring_head_stride: int = opt(
        1, "Ring attention: attention heads processed per communication step", dotted="ds.ring_attn_head_stride"
    )

    def check_model(self) -> None:
        require(bool(self.pretrain), "--pretrain is required: pass a model directory, s3:// URI or hub name")
        require(
            not self.revision or not (self.pretrain.startswith(("/", ".", "~")) or "://" in self.pretrain),
            f"--revision {self.revision}: --pretrain {self.pretrain} is a directory or store URI, not a hub name; "
            f"drop --revision (it pins a Hugging Face hub model)",
        )
        require(self.ring_attn_size >= 1, f"--ring_attn_size {self.ring_attn_size}: must be >= 1 (1 turns it off)")
        require(self.ring_head_stride >= 1, f"--ring_head_stride {self.ring_head_stride}: must be >= 1")
        if self.load_in_4bit and hasattr(self, "lora_rank"):  # training: 4-bit weights are frozen, so LoRA
            require(
                self.lora_rank > 0,
                "--load_in_4bit trains LoRA adapters on a frozen 4-bit base (QLoRA): also pass --lora_rank, e.g. 64",
            )


@dataclass
class LoraConfig:
    lora_rank: int = opt(0, "LoRA rank; 0 trains all weights", dotted="ds.lora.rank")
    lora_alpha: int = opt(16, "LoRA scaling alpha", dotted="ds.lora.alpha")
    lora_dropout: float = opt(0.0, "LoRA dropout", dotted="ds.lora.dropout")
    target_modules: list[str] = opt(
        ["all-linear"], "Modules that get LoRA adapters (names, or all-linear)", dotted="ds.lora.target_modules"
    )

    def check_lora(self) -> None:
        require(self.lora_rank >= 0, f"--lora_rank {self.lora_rank}: must be >= 0 (0 disables LoRA)")
        require(0.0 <= self.lora_dropout < 1.0, f"--lora_dropout {self.lora_dropout}: must be in [0, 1)")


@dataclass
class LoraSaveConfig:
    """How a LoRA-trained policy is saved (SFT, DPO, KTO, PPO). A reward model is always saved merged:
    its config.json carries the reward's normalisation, which an adapter folder has no place for."""

    merge_lora: bool = opt(
        False,
        "With --lora_rank: also save the model with the adapters merged in (save_path holds "
        "the merged model, save_path/adapter the adapter). Without it save_path holds only "
        "the PEFT adapter (adapter_config.json names the base), as OpenRLHF and TRL save it; "
        "every alignflow stage and `from_pretrained` (with peft installed) load it",
    )


@dataclass
class PackingConfig:
    packing_samples: bool = opt(
        False,
        "Pack several samples into one row for the training forward passes, keeping "
        "per-sample positions and attention (same losses, less padding computed)",
        dotted="ds.packing_samples",
    )


DATASET_NUM_PROC_HELP = (
    "Processes tokenizing the data (Dataset.map num_proc; TRL's name). 0: 1 below 10,000 rows "
    "(starting workers costs more than it saves), else min(8, cores). Not part of the stage "
    "identity: the tokens are the same either way"
)


@dataclass
class PromptFormatConfig:
    """How a row's prompt becomes text (every stage that reads prompts: SFT, RM, DPO, KTO, PPO, batch inference)."""

    input_key: str = opt(
        "input", "JSON key of the prompt / conversation (a string or a list of messages)", dotted="data.input_key"
    )
    input_template: Optional[str] = opt(
        None, "Template wrapping the prompt, e.g. 'User: {}\\nAssistant: '", dotted="data.input_template"
    )
    apply_chat_template: bool = opt(
        False, "Render prompts with the tokenizer's chat template", dotted="data.apply_chat_template"
    )

    def check_prompt_format(self) -> None:
        require(
            not (self.input_template and self.apply_chat_template),
            "--input_template and --apply_chat_template both given: pick one way to format prompts",
        )
        if self.input_template:
            require(
                "{}" in self.input_template,
                f"--input_template {self.input_template!r} has no '{{}}' where the prompt goes",
            )


@dataclass
class DataConfig(PromptFormatConfig, PackingConfig):
    dataset: Optional[str] = opt(
        None,
        "Comma-separated datasets: .jsonl/.json files, json@DIR, directories, store URIs or hub names",
        path="data",
        dotted={"": "data.dataset", "opd": "data.prompt_dataset"},
    )
    dataset_probs: Optional[str] = opt(
        None,
        "Comma-separated sampling probabilities for --dataset (default: equal)",
        dotted={"": "data.dataset_probs", "opd": "data.prompt_probs"},
    )
    dataset_split: str = opt(
        "train", "Split to train on", dotted={"": "data.dataset_split", "opd": "data.prompt_split"}
    )
    eval_dataset: Optional[str] = opt(
        None, "Evaluation dataset (same forms as --dataset)", path="data", dotted="eval.dataset"
    )
    eval_split: str = opt("test", "Split to evaluate on", dotted="eval.split")
    max_samples: int = opt(
        100_000_000, "Use at most this many samples from the (mixed) dataset", dotted="data.max_samples"
    )
    dataset_num_proc: int = opt(0, DATASET_NUM_PROC_HELP, identity=False)
    max_len: int = opt(
        2048, "Truncate samples to this many tokens (truncations are counted and reported)", dotted="data.max_len"
    )
    output_key: Optional[str] = opt(None, "JSON key of the response", dotted="data.output_key")
    multiturn: bool = opt(
        False, "Train on every assistant turn of the conversation in --input_key", dotted="data.multiturn"
    )
    pretrain_mode: bool = opt(
        False,
        "Loss on every token (continued pre-training), not only the response",
        dotted="model.pretrain_mode_enable",
    )

    def check_data(self) -> None:
        require(bool(self.dataset), "--dataset is required: pass a .jsonl file, json@DIR or a hub name")
        require(self.max_len > 1, f"--max_len {self.max_len}: must be > 1")
        require(self.max_samples > 0, f"--max_samples {self.max_samples}: must be > 0")
        require(self.dataset_num_proc >= 0, f"--dataset_num_proc {self.dataset_num_proc}: must be >= 0 (0: automatic)")
        check_mixing("--dataset", self.dataset, "--dataset_probs", self.dataset_probs)


def check_mixing(data_flag: str, specs: str, probs_flag: str, probs: str | None) -> None:
    """One probability per comma-separated dataset, numbers >= 0, not all 0."""
    if not probs:
        return
    n_sets = len(specs.split(","))
    try:
        values = [float(p) for p in probs.split(",")]
    except ValueError:
        raise ConfigError(f"{probs_flag} {probs!r}: use comma-separated numbers like 0.3,0.7") from None
    require(
        len(values) == n_sets,
        f"{probs_flag} has {len(values)} values for {n_sets} datasets: give one per {data_flag} entry",
    )
    require(
        all(v >= 0 for v in values) and sum(values) > 0,
        f"{probs_flag} {probs}: probabilities must be >= 0 and not all 0",
    )


PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass
class RanksConfig:
    """Where the stage's ranks go on a Ray cluster (alignment.distributed.ray_ranks). Under
    torchrun/deepspeed the launcher sets the world size and these must be left at 1 or match it."""

    num_nodes: int = opt(
        1, "Nodes of the stage's rank group on Ray (OpenRLHF's name); ranks = this x --num_gpus_per_node"
    )
    num_gpus_per_node: int = opt(1, "Ranks per node on Ray: one GPU each, or one CPU each (gloo) on a CPU-only cluster")
    placement_strategy: str = opt(
        "PACK",
        "Ray placement-group strategy of the ranks (SPREAD: one node per rank " "where possible)",
        choices=PLACEMENT_STRATEGIES,
        identity=False,
    )
    accelerator_type: Optional[str] = opt(
        None,
        "Only place ranks on nodes with this Ray accelerator type (e.g. H100); "
        "refused in one line when the cluster has none",
        identity=False,
    )

    def ranks(self) -> int:
        return self.num_nodes * self.num_gpus_per_node

    def ranks_flags(self) -> str:
        """How the rank count was asked for, for messages."""
        return f"--num_nodes {self.num_nodes} x --num_gpus_per_node {self.num_gpus_per_node}"

    def check_ranks(self) -> None:
        require(
            self.num_nodes >= 1 and self.num_gpus_per_node >= 1,
            f"--num_nodes {self.num_nodes} / --num_gpus_per_node {self.num_gpus_per_node}: both must be >= 1",
        )


@dataclass
class TrainConfig:
    micro_train_batch_size: int = opt(
        8, "Samples (or packed rows) per rank per forward/backward", dotted="train.micro_batch_size"
    )
    train_batch_size: int = opt(
        128, "Global batch per optimizer step; accumulation = this / (micro * world size)", dotted="train.batch_size"
    )
    max_epochs: int = opt(1, "Passes over the training data", dotted="train.max_epochs")
    max_steps: int = opt(-1, "Stop after this many optimizer steps (-1: run all epochs)")
    learning_rate: float = opt(5e-6, "Peak learning rate", dotted={"": "adam.lr", "ppo": ()})
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
    )
    muon_lr: Optional[float] = opt(
        None,
        "--optim muon: peak learning rate of the Muon half (default: --learning_rate). "
        "Muon's orthogonalised updates move each weight ~1/sqrt(width) as much as "
        "AdamW's at the same rate, so it usually wants a larger one",
    )
    adam_betas: list[float] = opt(
        [0.9, 0.95], "Adam betas", dotted={"": "adam.betas", "ppo": ("actor.adam.betas", "critic.adam.betas")}
    )
    l2: float = opt(
        0.0,
        "Weight decay",
        dotted={"": "adam.weight_decay", "ppo": ("actor.adam.weight_decay", "critic.adam.weight_decay")},
    )
    max_norm: float = opt(1.0, "Gradient clipping norm", dotted={"ppo": ("actor.max_norm", "critic.max_norm")})
    max_nonfinite_skips: int = opt(
        0,
        "Micro-batches whose loss is NaN/Inf to skip before the stage stops (0: stop at "
        "the first; the PPO family counts per iteration). A NaN/Inf gradient norm or "
        "weight always stops it, uncommitted",
    )
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
    seed: int = opt(42, "Random seed (data order, init, dropout)", dotted="train.seed")
    local_rank: int = opt(-1, "Set by the deepspeed launcher", identity=False)
    num_threads: int = opt(0, "CPU threads per rank (0: cores / ranks on this node)", identity=False)

    def check_train(self) -> None:
        require(self.micro_train_batch_size > 0, f"--micro_train_batch_size {self.micro_train_batch_size}: must be > 0")
        require(self.train_batch_size > 0, f"--train_batch_size {self.train_batch_size}: must be > 0")
        require(self.learning_rate > 0, f"--learning_rate {self.learning_rate}: must be > 0")
        require(0.0 <= self.lr_warmup_ratio < 1.0, f"--lr_warmup_ratio {self.lr_warmup_ratio}: must be in [0, 1)")
        require(self.max_epochs > 0, f"--max_epochs {self.max_epochs}: must be > 0")
        require(
            self.max_steps == -1 or self.max_steps > 0,
            f"--max_steps {self.max_steps}: use -1 (run all --max_epochs) or a positive number of optimizer steps",
        )
        require(self.l2 >= 0, f"--l2 {self.l2}: weight decay must be >= 0 (0: none)")
        require(self.max_nonfinite_skips >= 0, f"--max_nonfinite_skips {self.max_nonfinite_skips}: must be >= 0")
        # a skipped micro-batch backs up a zero built from the parameters; ZeRO-3's are partitioned placeholders
        require(
            not (self.max_nonfinite_skips and self.zero_stage == 3),
            "--max_nonfinite_skips with --zero_stage 3 is not supported: use --zero_stage 0-2 or drop the flag",
        )
        require(len(self.adam_betas) == 2, f"--adam_betas needs two values, got {self.adam_betas}")
        if self.muon_lr is not None:
            require(
                self.optim == "muon",
                f"--muon_lr {self.muon_lr} sets the Muon half of --optim muon: add " f"--optim muon or drop --muon_lr",
            )
            require(self.muon_lr > 0, f"--muon_lr {self.muon_lr}: must be > 0")
        require(
            not (self.adam_offload and self.zero_stage == 0),
            "--adam_offload with --zero_stage 0: DeepSpeed offloads optimizer states only under ZeRO; "
            "use --zero_stage 1, 2 or 3, or drop --adam_offload",
        )

    def zero_stage_on(self, world_size: int) -> int:
        """The ZeRO stage an engine of `world_size` ranks runs: --zero_stage as given, else the automatic one."""
        if self.zero_stage is not None:
            return self.zero_stage
        return 0 if world_size == 1 and not self.adam_offload else 2

    def accumulation_steps(self, world_size: int) -> int:
        per_step = self.micro_train_batch_size * world_size
        require(
            self.train_batch_size % per_step == 0,
            f"--train_batch_size {self.train_batch_size} is not divisible by --micro_train_batch_size "
            f"{self.micro_train_batch_size} x world size {world_size} = {per_step}: "
            f"use a multiple of {per_step}, e.g. {max(per_step, self.train_batch_size // per_step * per_step)}",
        )
        return self.train_batch_size // per_step


@dataclass
class MoEConfig:
    aux_loss_coef: float = opt(
        0.0,
        "MoE router load-balancing loss weight (sparse-MoE models such as Mixtral; 0: off)",
        dotted="model.aux_loss_coef",
    )

    def check_moe(self) -> None:
        require(self.aux_loss_coef >= 0, f"--aux_loss_coef {self.aux_loss_coef}: must be >= 0 (0 turns it off)")


@dataclass
class CheckpointConfig:
    save_path: str = opt(
        "./ckpt", "Where the final HF-format model goes (local path or s3://)", identity=False, dotted="ckpt.output_dir"
    )
    save_steps: int = opt(
        -1,
        "Commit a resumable checkpoint every N optimizer steps (-1: none by step count)",
        identity=False,
        dotted="ckpt.save_steps",
    )
    save_minutes: float = opt(
        0.0,
        "Also commit a resumable checkpoint once this many minutes have passed since the "
        "last one (0: off). A flow stage with neither set checkpoints every 30 minutes",
        identity=False,
    )
    ckpt_path: str = opt(
        "./ckpt/checkpoints", "Where resumable checkpoints go (local path or s3://)", identity=False, dotted="ckpt.path"
    )
    load_checkpoint: bool = opt(
        False,
        "Resume from the newest committed checkpoint under --ckpt_path",
        identity=False,
        dotted="ckpt.load_enable",
    )
    max_ckpt_num: int = opt(3, "Keep this many resumable checkpoints", identity=False, dotted="ckpt.max_num")
    disable_ds_ckpt: bool = opt(
        False, "Don't write resumable checkpoints (final model only)", identity=False, dotted="ckpt.disable_ds"
    )
    save_hf_ckpt: bool = opt(
        False,
        "Also save an HF-format copy of the model (PPO: the actor) in every checkpoint, "
        "as <ckpt>/global_step<N>/<role>/hf/, committed and verified with it",
        identity=False,
        dotted="ckpt.save_hf",
    )

    def check_checkpoint(self) -> None:
        require(self.max_ckpt_num >= 1, f"--max_ckpt_num {self.max_ckpt_num}: must be >= 1")
        require(
            self.save_steps == -1 or self.save_steps > 0, f"--save_steps {self.save_steps}: use -1 or a positive number"
        )
        require(self.save_minutes >= 0, f"--save_minutes {self.save_minutes}: use 0 (off) or a positive number")
        # OpenRLHF's defaults nest ./ckpt/checkpoints in ./ckpt: harmless for a run that never checkpoints
        if (self.save_steps > 0 or self.save_minutes > 0 or self.load_checkpoint) and not self.disable_ds_ckpt:
            check_checkpoint_folder(self.ckpt_path, self.save_path, self.load_checkpoint)


# --use_wandb values that switch wandb on without being a key (any other value is the API key)
WANDB_SWITCHES = ("offline", "true", "1", "env")


@dataclass
class LoggingConfig:
    logging_steps: int = opt(1, "Log metrics every N optimizer steps", identity=False, dotted="logger.logging_steps")
    eval_steps: int = opt(-1, "Evaluate every N steps (-1: at the end of each epoch)", dotted="eval.steps")
    use_wandb: Optional[str] = opt(
        None,
        "Log to Weights & Biases: 'env' (the key from WANDB_API_KEY), 'offline', or the API key "
        "(moved out of the command line at start). Never printed",
        secret=True,
        dotted="logger.wandb.key",
    )
    wandb_org: Optional[str] = opt(None, "wandb entity", identity=False, dotted="logger.wandb.org")
    wandb_group: Optional[str] = opt(None, "wandb group", identity=False, dotted="logger.wandb.group")
    wandb_project: str = opt("alignflow", "wandb project", identity=False, dotted="logger.wandb.project")
    wandb_run_name: Optional[str] = opt(None, "wandb run name", identity=False, dotted="logger.wandb.run_name")
    use_tensorboard: Optional[str] = opt(
        None, "Write TensorBoard events under this directory", identity=False, dotted="logger.tensorboard_dir"
    )

    def check_logging(self) -> None:
        require(self.logging_steps > 0, f"--logging_steps {self.logging_steps}: must be > 0")
