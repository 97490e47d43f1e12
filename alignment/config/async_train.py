"""How an RL iteration's work is scheduled: token-budget micro-batches (--use_dynamic_batch) and asynchronous
training (--async_train: generation overlapped with training, within a staleness bound)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require
from alignment.config.rollout import only_with


@dataclass(frozen=True)
class DynamicBatch:
    """`train` settings; DynamicBatchConfig checks them."""

    dynamic_batch_enable: bool = opt(
        False,
        "Cut micro-batches by a token budget instead of a row count: rows of similar "
        "length together, as many as fit, so short responses are not padded to the "
        "longest (--micro_train_batch_size / --micro_rollout_batch_size then no longer "
        "cut the training and log-prob passes; the step's rows and loss are unchanged)",
        dotted="train.dynamic_batch_enable",
        flat="use_dynamic_batch",
    )
    max_tokens_per_gpu: int = opt(
        16192,
        "With --use_dynamic_batch: most tokens per training micro-batch "
        "(rows x longest row; the real tokens with --packing_samples)",
        dotted="train.max_tokens_per_gpu",
        flat="train_max_tokens_per_gpu",
    )


@dataclass(frozen=True)
class DynamicBatchRollout:
    """`rollout` settings; DynamicBatchConfig checks them."""

    max_tokens_per_gpu: Optional[int] = opt(
        None,
        "With --use_dynamic_batch: most tokens per log-prob / value "
        "forward when making experience (unset: "
        "--train_max_tokens_per_gpu)",
        dotted="rollout.max_tokens_per_gpu",
        flat="rollout_max_tokens_per_gpu",
    )


class DynamicBatchConfig:
    """The checks of `DynamicBatch` (`train`), `DynamicBatchRollout` (`rollout`): a stage's `validate()` runs them,
    before anything loads."""

    def check_dynamic_batch(self) -> None:
        if not self.train.dynamic_batch_enable:
            return only_with(self, "use_dynamic_batch", "train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu")
        # a budget below the longest possible sample is allowed, as in OpenRLHF: a row longer than the budget
        # gets a micro-batch of its own (alignment/ppo/token_budget.py), nothing is truncated
        for name in ("train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu"):
            value = getattr(self, name)
            require(value is None or value > 0, f"--{name} {value}: must be > 0")


@dataclass(frozen=True)
class AsyncTrain:
    """`train` settings; AsyncTrainConfig checks them."""

    async_enable: bool = opt(
        False,
        "Overlap rollouts with training (OpenRLHF's --async_train): the vLLM engines generate "
        "the next iteration's samples while this one trains, so samples come from a policy up "
        "to --async_queue_size updates old, and the PPO ratio is taken against the engines' "
        "sampled-token log-probs (the behaviour policy). Needs --vllm_num_engines >= 1, or --agent_func_path: "
        "on the HF engine an iteration then trains on the first episode groups to finish and the others go "
        "on, their environments stepping while the actor trains (docs/agents.md)",
        dotted="train.async_enable",
        flat="async_train",
    )
    async_queue_size: int = opt(
        1,
        "With --async_train: iterations generated ahead of the one training (the bound on the policy lag)",
        dotted="train.async_queue_size",
    )
    partial_rollout_enable: bool = opt(
        False,
        "With --async_train: weight updates reach the vLLM engines between two decoding steps of a running "
        "generation instead of after it, so responses in flight finish on the new weights (alignment/rollout/"
        "partial.py); logged as train/partial/*",
        dotted="train.partial_rollout_enable",
    )


@dataclass(frozen=True)
class AsyncRollout:
    """`rollout` settings; AsyncTrainConfig checks them."""

    vllm_generate_batch_size: Optional[int] = opt(
        None,
        "With --async_train and --dynamic_filtering: prompts sampled per iteration (default --rollout_batch_size); "
        "the groups beyond --rollout_batch_size are the filter's first refills, generated with the batch "
        "(OpenRLHF's oversampling)",
        dotted="rollout.vllm_generate_batch_size",
    )


class AsyncTrainConfig:
    """The checks of `AsyncTrain` (`train`), `AsyncRollout` (`rollout`): a stage's `validate()` runs them, before
    anything loads."""

    def oversampled(self) -> int:
        """Prompts generated per iteration beyond --rollout_batch_size (--vllm_generate_batch_size)."""
        return max(0, (self.rollout.vllm_generate_batch_size or 0) - self.rollout.batch_size)  # type: ignore[attr-defined]

    def check_async_train(self) -> None:
        size = self.rollout.vllm_generate_batch_size
        require(
            size is None or size >= self.rollout.batch_size,  # type: ignore[attr-defined]
            f"--vllm_generate_batch_size {size}: below --rollout_batch_size; leave it unset or raise it",
        )
        if self.oversampled():  # as OpenRLHF, with async; here the extra groups feed the dynamic filter
            require(
                self.train.async_enable and self.algo.dynamic_filtering_enable,  # type: ignore[attr-defined]
                f"--vllm_generate_batch_size {size} > --rollout_batch_size oversamples for --dynamic_filtering under "
                f"--async_train: add both, or leave it unset",
            )
        if not self.train.async_enable:
            return only_with(self, "async_train", "async_queue_size", "partial_rollout_enable")
        engines = self.vllm.num_engines >= 1  # type: ignore[attr-defined]  (RolloutConfig)
        require(
            engines or bool(self.train.agent_func_path),  # type: ignore[attr-defined]  (AgentConfig)
            "--async_train overlaps generation on the vLLM engines with training on the actor: add "
            "--vllm_num_engines 1 (or more); the HF engine generates on the actor itself, so nothing would overlap "
            "(with --agent_func_path it overlaps the environments' steps: alignment/agents/pool.py)",
        )
        require(
            engines or not self.train.partial_rollout_enable,
            "--partial_rollout_enable pauses the vLLM engines' generations at a weight sync: add --vllm_num_engines 1; "
            "on the HF engine an agent's episodes already go on across updates, turn by turn (--async_train)",
        )
        require(self.train.async_queue_size >= 1, f"--async_queue_size {self.train.async_queue_size}: must be >= 1")
