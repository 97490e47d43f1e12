"""Importance-sampling correction between the rollout engine and the trainer (OpenRLHF's
--algo.advantage.is_correction_*): vLLM and the trainer compute slightly different probabilities for the same
weights, so the engine's samples are off-policy for the trainer; alignment/losses/ppo.is_weights holds the math."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require


@dataclass(frozen=True)
class ISCorrection:
    """`algo.advantage` settings; ISCorrectionConfig checks them."""

    is_correction_enable: bool = opt(
        False,
        "Weigh each sampled token's policy-loss term by w = trainer prob / engine prob, the vLLM engine that "
        "sampled and the trainer disagreeing (Yao et al. 2025), as --vllm_is_correction_type says",
        aliases=("--vllm_enable_is_correction",),
        dotted="algo.advantage.is_correction_enable",
        flat="enable_vllm_is_correction",
    )
    is_correction_threshold: list[float] = opt(
        [0.5, 5.0],
        "LOW HIGH of --enable_vllm_is_correction's weights (one value: HIGH, with LOW 0)",
        dotted="algo.advantage.is_correction_threshold",
        flat="vllm_is_truncated_threshold",
    )
    is_correction_type: str = opt(
        "tis",
        "tis: w clamped to [LOW, HIGH]; icepop: tokens whose w is outside [LOW, HIGH] weigh 0, the others w; "
        "seq-mask-tis: sequences whose geometric-mean w is outside [LOW, HIGH] weigh 0, the others w per token",
        choices=("tis", "icepop", "seq-mask-tis"),
        dotted="algo.advantage.is_correction_type",
        flat="vllm_is_correction_type",
    )


class ISCorrectionConfig:
    """The checks of `ISCorrection` (`algo.advantage`): a stage's `validate()` runs them, before anything loads."""

    def is_thresholds(self) -> tuple[float, float]:
        """(LOW, HIGH) of --vllm_is_truncated_threshold; one value is HIGH with LOW 0 (plain truncation)."""
        given = self.algo.advantage.is_correction_threshold
        low, high = (0.0, given[0]) if len(given) == 1 else tuple(given) if len(given) == 2 else (1.0, 0.0)
        require(
            0 <= low < high,
            f"--vllm_is_truncated_threshold {' '.join(map(str, given))}: give LOW HIGH with 0 <= LOW < HIGH "
            f"(e.g. 0.5 5.0)",
        )
        return float(low), float(high)

    def check_is_correction(self) -> None:
        if not self.algo.advantage.is_correction_enable:
            return
        require(
            self.vllm.num_engines >= 1,  # type: ignore[attr-defined]  (RolloutConfig)
            "--enable_vllm_is_correction weighs vLLM engines' samples for the trainer; with the HF engine the "
            "trainer's own module samples (no mismatch): add --vllm_num_engines 1 or drop the flag",
        )
        self.is_thresholds()  # its own message when malformed
