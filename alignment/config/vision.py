"""OpenRLHF v0.11's vision-language RLHF flags (torch-free, as the rest of the schema)."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.rollout import only_with


@dataclass
class VisionConfig:
    """OpenRLHF v0.11's vision-language RLHF flags. Images in prompts need a vision-language actor and its
    processor; that path is not built yet, so a run that would use images is refused in one line (never run
    text-only while images are dropped). With --max_images_per_prompt 0 (text only) the flags change nothing."""

    image_key: str = opt("images", "Dataset key of a prompt's images (paths or URLs)", dotted="data.image_key")
    max_images_per_prompt: int = opt(
        0, "Most images per prompt (0: text-only prompts)", dotted="data.max_images_per_prompt"
    )
    freeze_visual_encoder: bool = opt(
        False, "Train only the language model of a vision-language actor", dotted="actor.freeze_visual_encoder"
    )

    def check_vision(self) -> None:
        require(self.max_images_per_prompt >= 0, f"--max_images_per_prompt {self.max_images_per_prompt}: must be >= 0")
        if self.max_images_per_prompt == 0:
            require(
                not self.freeze_visual_encoder,
                "--freeze_visual_encoder freezes a vision-language actor's image encoder, which is used only with "
                "--max_images_per_prompt >= 1: add that or drop the flag",
            )
            return only_with(self, "max_images_per_prompt", "image_key")
        require(
            False,
            f"--max_images_per_prompt {self.max_images_per_prompt}: vision-language RLHF (images in prompts, "
            f"a vision-language actor) is not built in alignflow yet; use --max_images_per_prompt 0 with a "
            f"text-only model",
        )
