"""The PPO family's rollout flags: the prompts, generation (the HF engine or vLLM engines), token-budget
micro-batches and asynchronous training. OpenRLHF's flag names; torch-free like the rest of the schema."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Optional

from alignment.config.base import opt, require
from alignment.config.groups import DATASET_NUM_PROC_HELP, PromptFormatConfig, check_mixing


@dataclass
class RolloutConfig(PromptFormatConfig):
    own_group: ClassVar[str] = "vllm"

    prompt_data: Optional[str] = opt(
        None, "Comma-separated prompt datasets (same forms as --dataset)", path="data", dotted="data.prompt_dataset"
    )
    prompt_data_probs: Optional[str] = opt(None, "Sampling probabilities for --prompt_data", dotted="data.prompt_probs")
    prompt_split: str = opt("train", "Split of --prompt_data to train on", dotted="data.prompt_split")
    eval_dataset: Optional[str] = opt(
        None, "Prompts for periodic held-out evaluation", path="data", dotted="eval.dataset"
    )
    label_key: Optional[str] = opt(
        None, "JSON key passed as `labels` to a reward_func / remote RM", dotted="data.label_key"
    )
    max_samples: int = opt(100_000_000, "Use at most this many prompts", dotted="data.max_samples")
    dataset_num_proc: int = opt(0, DATASET_NUM_PROC_HELP, identity=False, group="data")
    prompt_max_len: int = opt(
        1024, "Prompts longer than this (in tokens) are dropped, counted and reported", dotted="data.prompt_max_len"
    )
    generate_max_len: int = opt(1024, "Most new tokens per response", dotted="rollout.max_new_tokens")
    temperature: float = opt(1.0, "Sampling temperature", dotted="rollout.temperature")
    top_p: float = opt(1.0, "Nucleus sampling", dotted="rollout.top_p")
    n_samples_per_prompt: int = opt(
        1, "Responses sampled per prompt (group estimators need >= 2)", dotted="rollout.n_samples_per_prompt"
    )
    num_episodes: int = opt(
        1, "Passes over the prompt data (--max_epochs is passes over each rollout batch)", dotted="train.num_episodes"
    )
    rollout_batch_size: int = opt(1024, "Prompts per PPO iteration", dotted="rollout.batch_size")
    micro_rollout_batch_size: int = opt(
        8, "Sequences per rank per forward when making experience", dotted="rollout.micro_batch_size"
    )
    vllm_num_engines: int = opt(
        0, "vLLM rollout engines (0: the batched HF engine inside the actor)", dotted="vllm.num_engines"
    )
    vllm_tensor_parallel_size: int = opt(
        1, "Tensor-parallel size of each vLLM engine", dotted="vllm.tensor_parallel_size"
    )
    vllm_gpu_memory_utilization: float = opt(
        0.9, "Fraction of GPU memory vLLM may take", dotted="vllm.gpu_memory_utilization"
    )
    vllm_sync_backend: str = opt(
        "nccl",
        "Weight sync to the vLLM engines: a broadcast from actor rank 0 over NCCL (GPUs, "
        "engines on their own GPUs) or gloo (CPU); nccl without GPUs or with "
        "--colocate_all_models sends chunks through Ray's object store instead (logged)",
        choices=("nccl", "gloo"),
        dotted="vllm.sync_backend",
    )
    enable_prefix_caching: bool = opt(False, "vLLM prefix caching", dotted="vllm.enable_prefix_caching")
    enforce_eager: bool = opt(
        True,
        "vLLM engines without CUDA graphs. They always run eager here (alignment/rollout/"
        "vllm_engine.py), so OpenRLHF's --enforce_eager is what happens and "
        "--enforce_eager false is refused",
        dotted="vllm.enforce_eager",
    )
    vllm_sync_chunk_mb: int = opt(64, "Most megabytes per chunk when the actor's weights are sent to the vLLM engines")

    def check_rollout(self) -> None:
        require(bool(self.prompt_data), "--prompt_data is required: pass a .jsonl file, json@DIR or a hub name")
        check_mixing("--prompt_data", self.prompt_data, "--prompt_data_probs", self.prompt_data_probs)
        require(self.dataset_num_proc >= 0, f"--dataset_num_proc {self.dataset_num_proc}: must be >= 0 (0: automatic)")
        require(
            self.prompt_max_len > 0 and self.generate_max_len > 0,
            f"--prompt_max_len {self.prompt_max_len} / --generate_max_len {self.generate_max_len}: must be > 0",
        )
        require(self.temperature > 0, f"--temperature {self.temperature}: must be > 0")
        require(0 < self.top_p <= 1, f"--top_p {self.top_p}: must be in (0, 1]")
        require(self.n_samples_per_prompt >= 1, f"--n_samples_per_prompt {self.n_samples_per_prompt}: must be >= 1")
        require(self.num_episodes >= 1, f"--num_episodes {self.num_episodes}: must be >= 1")
        require(
            self.rollout_batch_size > 0 and self.micro_rollout_batch_size > 0,
            "--rollout_batch_size and --micro_rollout_batch_size must be > 0",
        )
        require(self.vllm_num_engines >= 0, f"--vllm_num_engines {self.vllm_num_engines}: must be >= 0")
        require(self.vllm_sync_chunk_mb > 0, f"--vllm_sync_chunk_mb {self.vllm_sync_chunk_mb}: must be > 0")
        require(
            self.enforce_eager,
            "--enforce_eager false: CUDA-graph capture is not built for the vLLM engines "
            "(they run eager); drop the flag",
        )
        require(
            0 < self.vllm_gpu_memory_utilization <= 1,
            f"--vllm_gpu_memory_utilization {self.vllm_gpu_memory_utilization}: must be in (0, 1]",
        )


def only_with(cfg: Any, gate: str, *names: str) -> None:
    """Flags that mean something only with --gate: set without it they would be accepted and ignored."""
    defaults = {f.name: f.default for f in fields(cfg)}
    for name in names:
        require(
            getattr(cfg, name) == defaults[name], f"--{name} is set but --{gate} is not: add --{gate} or drop --{name}"
        )


@dataclass
class DynamicBatchConfig:
    use_dynamic_batch: bool = opt(
        False,
        "Cut micro-batches by a token budget instead of a row count: rows of similar "
        "length together, as many as fit, so short responses are not padded to the "
        "longest (--micro_train_batch_size / --micro_rollout_batch_size then no longer "
        "cut the training and log-prob passes; the step's rows and loss are unchanged)",
        dotted="train.dynamic_batch_enable",
    )
    train_max_tokens_per_gpu: int = opt(
        16192,
        "With --use_dynamic_batch: most tokens per training micro-batch "
        "(rows x longest row; the real tokens with --packing_samples)",
        dotted="train.max_tokens_per_gpu",
    )
    rollout_max_tokens_per_gpu: Optional[int] = opt(
        None,
        "With --use_dynamic_batch: most tokens per log-prob / value "
        "forward when making experience (unset: "
        "--train_max_tokens_per_gpu)",
        dotted="rollout.max_tokens_per_gpu",
    )

    def check_dynamic_batch(self) -> None:
        if not self.use_dynamic_batch:
            return only_with(self, "use_dynamic_batch", "train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu")
        longest = self.prompt_max_len + self.generate_max_len  # type: ignore[attr-defined]  (RolloutConfig)
        for name in ("train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu"):
            value = getattr(self, name)
            require(
                value is None or value >= longest,
                f"--{name} {value} is below --prompt_max_len + --generate_max_len = {longest}, the longest "
                f"sample: raise it to at least {longest}",
            )


@dataclass
class AsyncTrainConfig:
    async_train: bool = opt(
        False,
        "Overlap rollouts with training (OpenRLHF's --async_train): the vLLM engines generate "
        "the next iteration's samples while this one trains, so samples come from a policy up "
        "to --async_queue_size updates old, and the PPO ratio is taken against the engines' "
        "sampled-token log-probs (the behaviour policy). Needs --vllm_num_engines >= 1",
        dotted="train.async_enable",
    )
    async_queue_size: int = opt(
        1,
        "With --async_train: iterations generated ahead of the one training (the bound on the policy lag)",
        dotted="train.async_queue_size",
    )

    def check_async_train(self) -> None:
        if not self.async_train:
            return only_with(self, "async_train", "async_queue_size")
        require(
            self.vllm_num_engines >= 1,  # type: ignore[attr-defined]  (RolloutConfig)
            "--async_train overlaps generation on the vLLM engines with training on the actor: add "
            "--vllm_num_engines 1 (or more); the HF engine generates on the actor itself, so nothing would overlap",
        )
        require(self.async_queue_size >= 1, f"--async_queue_size {self.async_queue_size}: must be >= 1")
