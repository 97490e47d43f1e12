"""Preference pairs (chosen / rejected keys) and the frozen reference model the DPO family compares against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from alignment.config.base import opt, require


@dataclass(frozen=True)
class PairData:
    """`data` settings; PairDataConfig checks them."""

    prompt_key: Optional[str] = opt(
        None,
        "JSON key of the prompt; without it chosen/rejected are whole conversations "
        "(the last turn is the answer) or plain texts",
        dotted="data.prompt_key",
    )
    chosen_key: str = opt("chosen", "JSON key of the preferred response", dotted="data.chosen_key")
    rejected_key: str = opt("rejected", "JSON key of the dispreferred response", dotted="data.rejected_key")


class PairDataConfig:
    """The checks of `PairData` (`data`): a stage's `validate()` runs them, before anything loads."""

    def check_pair_data(self) -> None:
        require(
            not self.data.multiturn and not self.model.pretrain_mode_enable,
            "--multiturn and --pretrain_mode are SFT flags; "
            "preference stages read --prompt_key/--chosen_key/--rejected_key",
        )


@dataclass(frozen=True)
class Reference:
    """`ref` settings; ReferenceConfig checks them."""

    model_name_or_path: Optional[str] = opt(
        None,
        "Reference model (default: --pretrain, the policy's initial weights)",
        path="model",
        dotted="ref.model_name_or_path",
        flat="ref_pretrain",
    )
    offload: bool = opt(
        False,
        "Keep the frozen reference model in CPU memory (its forward runs there)",
        dotted="ref.offload",
        flat="ref_offload",
    )


@dataclass(frozen=True)
class ReferenceModel:
    """`model` settings; ReferenceConfig checks them."""

    beta: float = opt(0.1, "Strength of the implicit KL penalty toward the reference", dotted="model.beta")


class ReferenceConfig:
    """The checks of `Reference` (`ref`), `ReferenceModel` (`model`): a stage's `validate()` runs them, before anything
    loads."""

    def check_reference(self) -> None:
        require(self.model.beta > 0, f"--beta {self.model.beta}: must be > 0")
