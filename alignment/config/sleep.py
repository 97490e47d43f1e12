"""Sleep modes (OpenRLHF's --vllm_enable_sleep / --deepspeed_enable_sleep): free accelerator memory between the
phases of an iteration when the engines and the trained models share devices (--colocate_all_models).

They free accelerator memory, so on a CPU-only cluster — where every state already lives in host memory — they
have nothing to move: the run says so in one log line and goes on (as --flash_attn does on CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require


@dataclass(frozen=True)
class SleepVLLM:
    """`vllm` settings; SleepConfig checks them."""

    enable_sleep: bool = opt(
        False,
        "Put the vLLM engines to sleep (weights to CPU memory, KV cache freed) "
        "between rollouts; they wake for the weight sync and the next rollout",
        identity=False,
        dotted="vllm.enable_sleep",
        flat="vllm_enable_sleep",
    )


@dataclass(frozen=True)
class SleepDS:
    """`ds` settings; SleepConfig checks them."""

    enable_sleep: bool = opt(
        False,
        "Move the actor's and critic's optimizer states to CPU memory between "
        "their training passes (DeepSpeed's offload_states / reload_states)",
        identity=False,
        dotted="ds.enable_sleep",
        flat="deepspeed_enable_sleep",
    )


class SleepConfig:
    """The checks of `SleepVLLM` (`vllm`), `SleepDS` (`ds`): a stage's `validate()` runs them, before anything loads."""

    def check_sleep(self) -> None:
        if self.vllm.enable_sleep:
            require(
                self.vllm.num_engines >= 1,  # type: ignore[attr-defined]  (RolloutConfig)
                "--vllm_enable_sleep puts vLLM engines to sleep; there are none (--vllm_num_engines 0): drop it",
            )
            require(
                not self.train.async_enable,  # type: ignore[attr-defined]  (AsyncTrainConfig)
                "--vllm_enable_sleep with --async_train: the engines generate while the actor trains, so there is "
                "no idle phase to sleep through; drop one of them",
            )
        if self.ds.enable_sleep:
            require(
                self.ds.zero_stage is not None and self.ds.zero_stage >= 1,  # type: ignore[attr-defined]  (TrainConfig)
                "--deepspeed_enable_sleep moves ZeRO optimizer states (stage 0 has none): give --zero_stage 1, 2 or 3",
            )
            require(
                not self.ds.adam_offload,  # type: ignore[attr-defined]  (TrainConfig)
                "--deepspeed_enable_sleep with --adam_offload: the optimizer states already live in CPU memory; "
                "drop one of them",
            )
