"""The PPO family's rollout flags: the prompts, generation (the HF engine or vLLM engines), evaluation inside
RL (token-budget micro-batches and asynchronous training: config/async_train.py). Torch-free like the rest
of the schema."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from alignment.config.base import opt, require
from alignment.config.groups import DATASET_NUM_PROC_HELP, PromptFormatConfig, check_mixing


@dataclass(frozen=True)
class RolloutData:
    """`data` settings; RolloutConfig checks them."""

    prompt_dataset: Optional[str] = opt(
        None,
        "Comma-separated prompt datasets (same forms as --dataset)",
        path="data",
        dotted="data.prompt_dataset",
        flat="prompt_data",
    )
    prompt_probs: Optional[str] = opt(
        None, "Sampling probabilities for --prompt_data", dotted="data.prompt_probs", flat="prompt_data_probs"
    )
    prompt_split: str = opt("train", "Split of --prompt_data to train on", dotted="data.prompt_split")
    label_key: Optional[str] = opt(
        None, "JSON key passed as `labels` to a reward_func / remote RM", dotted="data.label_key"
    )
    max_samples: int = opt(100_000_000, "Use at most this many prompts", dotted="data.max_samples")
    dataset_num_proc: int = opt(0, DATASET_NUM_PROC_HELP, identity=False)
    max_len: Optional[int] = opt(
        None,
        "Most tokens of prompt plus response (OpenRLHF >= 0.10.2's --data.max_len): each response may have "
        "--data.max_len minus its prompt's length new tokens, at most --generate_max_len when that is given "
        "(unset: --prompt_max_len + --generate_max_len, 1024 each by default)",
        dotted="data.max_len",
    )
    prompt_max_len: Optional[int] = opt(
        None,
        "Prompts longer than this (in tokens) are dropped, counted and reported (default: 1024, or --max_len - 1)",
        dotted="data.prompt_max_len",
    )


@dataclass(frozen=True)
class RolloutEval:
    """`eval` settings; RolloutConfig checks them."""

    dataset: Optional[str] = opt(
        None,
        "Held-out prompts the policy answers every --eval_steps iterations (-1: once at the end), scored by the "
        "training reward: eval/pass1 (mean reward) and eval/pass<n> (mean best of --eval_n_samples_per_prompt)",
        path="data",
        dotted="eval.dataset",
        flat="eval_dataset",
    )
    split: str = opt("train", "Split of --eval_dataset", dotted="eval.split", flat="eval_split")
    temperature: float = opt(
        0.6, "Sampling temperature of the evaluation (0: greedy)", dotted="eval.temperature", flat="eval_temperature"
    )
    n_samples_per_prompt: int = opt(
        4,
        "Answers per held-out prompt (pass@n over them)",
        dotted="eval.n_samples_per_prompt",
        flat="eval_n_samples_per_prompt",
    )


@dataclass(frozen=True)
class RolloutCkpt:
    """`ckpt` settings; RolloutConfig checks them."""

    best_metric_key: str = opt(
        "",
        "The evaluation metric whose best value's checkpoint is kept (the `best` pointer under --ckpt_path; "
        "retention never deletes it): pass1 or pass<n>, also spelled eval/pass1 or OpenRLHF's "
        "eval_<data>_pass1; empty: pass1 when --eval_dataset and checkpoints are on; none: off",
        identity=False,
        dotted="ckpt.best_metric_key",
    )


@dataclass(frozen=True)
class Rollout:
    """`rollout` settings; RolloutConfig checks them."""

    max_new_tokens: Optional[int] = opt(
        None,
        "Most new tokens per response (default: 1024, or --max_len minus the prompt's length)",
        dotted="rollout.max_new_tokens",
        flat="generate_max_len",
    )
    temperature: float = opt(1.0, "Sampling temperature", dotted="rollout.temperature")
    top_p: float = opt(1.0, "Nucleus sampling", dotted="rollout.top_p")
    n_samples_per_prompt: int = opt(
        1, "Responses sampled per prompt (group estimators need >= 2)", dotted="rollout.n_samples_per_prompt"
    )
    batch_size: int = opt(1024, "Prompts per PPO iteration", dotted="rollout.batch_size", flat="rollout_batch_size")
    micro_batch_size: int = opt(
        8,
        "Sequences per rank per forward when making experience",
        dotted="rollout.micro_batch_size",
        flat="micro_rollout_batch_size",
    )

    @property
    def samples(self) -> int:
        """Samples generated per iteration: --rollout_batch_size x --n_samples_per_prompt."""
        return self.batch_size * self.n_samples_per_prompt


@dataclass(frozen=True)
class RolloutTrain:
    """`train` settings; RolloutConfig checks them."""

    num_episodes: int = opt(
        1, "Passes over the prompt data (--max_epochs is passes over each rollout batch)", dotted="train.num_episodes"
    )


@dataclass(frozen=True)
class RolloutVLLM:
    """`vllm` settings; RolloutConfig checks them."""

    num_engines: int = opt(
        0,
        "vLLM rollout engines (0: the batched HF engine inside the actor)",
        dotted="vllm.num_engines",
        flat="vllm_num_engines",
    )
    tensor_parallel_size: int = opt(
        1,
        "Tensor-parallel size of each vLLM engine",
        dotted="vllm.tensor_parallel_size",
        flat="vllm_tensor_parallel_size",
    )
    gpu_memory_utilization: float = opt(
        0.9,
        "Fraction of GPU memory vLLM may take",
        dotted="vllm.gpu_memory_utilization",
        flat="vllm_gpu_memory_utilization",
    )
    sync_backend: str = opt(
        "nccl",
        "Weight sync to the vLLM engines: a broadcast from actor rank 0 over NCCL (GPUs, "
        "engines on their own GPUs) or gloo (CPU); nccl without GPUs or with "
        "--colocate_all_models sends chunks through Ray's object store instead (logged)",
        choices=("nccl", "gloo"),
        dotted="vllm.sync_backend",
        flat="vllm_sync_backend",
    )
    enable_prefix_caching: bool = opt(False, "vLLM prefix caching", dotted="vllm.enable_prefix_caching")
    enforce_eager: bool = opt(
        True,
        "vLLM engines without CUDA graphs. They always run eager here (alignment/rollout/"
        "vllm_engine.py), so OpenRLHF's --enforce_eager is what happens and "
        "--enforce_eager false is refused",
        dotted="vllm.enforce_eager",
    )
    sync_with_ray: bool = opt(
        False,
        "Send the actor's weights to the vLLM engines in chunks through Ray's object store instead of a "
        "broadcast group (what happens anyway without GPUs of their own, or with --partial_rollout_enable)",
        dotted="vllm.sync_with_ray",
        flat="vllm_sync_with_ray",
    )
    vllm_sync_chunk_mb: int = opt(64, "Most megabytes per chunk when the actor's weights are sent to the vLLM engines")


class RolloutConfig(PromptFormatConfig):
    """The checks of `RolloutData` (`data`), `RolloutEval` (`eval`), `RolloutCkpt` (`ckpt`), `Rollout` (`rollout`),
    `RolloutTrain` (`train`), `RolloutVLLM` (`vllm`): a stage's `validate()` runs them, before anything loads."""

    def resolve_lengths(self) -> None:
        """The length settings OpenRLHF leaves to be derived: with --max_len (v0.10.2+), a prompt may take
        all but one token and a response the rest of --max_len (SamplingParams.max_total_len cuts each one);
        without it, <= 0.9's 1024 + 1024. Idempotent: a resolved config parses back to itself."""
        if self.data.max_len is None:
            self.prompt_max_len = 1024 if self.data.prompt_max_len is None else self.data.prompt_max_len
            self.generate_max_len = 1024 if self.rollout.max_new_tokens is None else self.rollout.max_new_tokens
            return
        require(
            self.data.max_len >= 2, f"--max_len {self.data.max_len}: must be >= 2 (a prompt token and a response token)"
        )
        self.prompt_max_len = self.data.max_len - 1 if self.data.prompt_max_len is None else self.data.prompt_max_len
        self.generate_max_len = (
            self.data.max_len - 1 if self.rollout.max_new_tokens is None else self.rollout.max_new_tokens
        )
        for name in ("prompt_max_len", "generate_max_len"):
            require(
                getattr(self, name) < self.data.max_len,
                f"--{name} {getattr(self, name)} leaves no room in --max_len {self.data.max_len} (prompt plus "
                f"response): lower it below {self.data.max_len} or raise --max_len",
            )

    def best_metric(self) -> str | None:
        """--best_metric_key as one of the evaluation's metric names (pass1, pass<n>), or None when off."""
        key = self.ckpt.best_metric_key.strip()
        if key == "none" or not self.eval.dataset:
            return None
        if not key:  # OpenRLHF's default: the first pass1 metric, where there are checkpoints to keep
            return "pass1" if self.outputs().checkpoints else None  # type: ignore[attr-defined]  (StageConfig)
        name = key.removeprefix("eval/").rsplit("_", 1)[-1]
        wanted = ("pass1", f"pass{self.eval.n_samples_per_prompt}")
        require(
            name in wanted,
            f"--best_metric_key {key}: the evaluation logs {' and '.join(wanted)}; name one of them (or none)",
        )
        require(
            self.outputs().checkpoints,  # type: ignore[attr-defined]  (StageConfig)
            f"--best_metric_key {key} keeps the best checkpoint: add --save_steps N (or --save_minutes) so the run "
            f"writes checkpoints",
        )
        return name

    def sequence_len(self) -> int:
        """The longest prompt plus response a run can hold (the engines' context, the token budgets' floor)."""
        return self.data.max_len or self.data.prompt_max_len + self.rollout.max_new_tokens

    def check_rollout(self) -> None:
        require(bool(self.data.prompt_dataset), "--prompt_data is required: pass a .jsonl file, json@DIR or a hub name")
        check_mixing("--prompt_data", self.data.prompt_dataset, "--prompt_data_probs", self.data.prompt_probs)
        require(
            self.data.dataset_num_proc >= 0,
            f"--dataset_num_proc {self.data.dataset_num_proc}: must be >= 0 (0: automatic)",
        )
        require(
            self.data.prompt_max_len > 0 and self.rollout.max_new_tokens > 0,
            f"--prompt_max_len {self.data.prompt_max_len} / "
            f"--generate_max_len {self.rollout.max_new_tokens}: must be > 0",
        )
        require(self.rollout.temperature > 0, f"--temperature {self.rollout.temperature}: must be > 0")
        if not self.eval.dataset:
            only_with(
                self, "eval_dataset", "eval_split", "eval_temperature", "eval_n_samples_per_prompt", "best_metric_key"
            )
        self.best_metric()  # its own message when malformed
        require(
            self.eval.temperature >= 0 and self.eval.n_samples_per_prompt >= 1,
            f"--eval_temperature {self.eval.temperature} must be >= 0 (0: greedy) and --eval_n_samples_per_prompt "
            f"{self.eval.n_samples_per_prompt} >= 1",
        )
        require(0 < self.rollout.top_p <= 1, f"--top_p {self.rollout.top_p}: must be in (0, 1]")
        require(
            self.rollout.n_samples_per_prompt >= 1,
            f"--n_samples_per_prompt {self.rollout.n_samples_per_prompt}: must be >= 1",
        )
        require(self.train.num_episodes >= 1, f"--num_episodes {self.train.num_episodes}: must be >= 1")
        require(
            self.rollout.batch_size > 0 and self.rollout.micro_batch_size > 0,
            "--rollout_batch_size and --micro_rollout_batch_size must be > 0",
        )
        require(self.vllm.num_engines >= 0, f"--vllm_num_engines {self.vllm.num_engines}: must be >= 0")
        require(self.vllm.vllm_sync_chunk_mb > 0, f"--vllm_sync_chunk_mb {self.vllm.vllm_sync_chunk_mb}: must be > 0")
        require(
            self.vllm.enforce_eager,
            "--enforce_eager false: CUDA-graph capture is not built for the vLLM engines "
            "(they run eager); drop the flag",
        )
        require(
            0 < self.vllm.gpu_memory_utilization <= 1,
            f"--vllm_gpu_memory_utilization {self.vllm.gpu_memory_utilization}: must be in (0, 1]",
        )


def only_with(cfg: Any, gate: str, *names: str) -> None:
    """Flags that mean something only with --gate: set without it they would be accepted and ignored."""
    defaults = {f.name: f.default for f in fields(cfg)}
    for name in names:
        require(
            getattr(cfg, name) == defaults[name], f"--{name} is set but --{gate} is not: add --{gate} or drop --{name}"
        )
