"""OpenRLHF v0.11's vision-language RLHF flags (torch-free, as the rest of the schema)."""

from __future__ import annotations

from dataclasses import dataclass

from alignment.config.base import opt, require
from alignment.config.rollout import only_with


@dataclass(frozen=True)
class VisionData:
    """`data` settings; VisionDataConfig checks them."""

    image_key: str = opt("images", "Dataset key of a prompt's images (paths or URLs)", dotted="data.image_key")
    max_images_per_prompt: int = opt(
        0, "Most images per prompt (0: text-only prompts)", dotted="data.max_images_per_prompt"
    )


class VisionDataConfig:
    """OpenRLHF v0.11's image flags (its PPO's; alignflow's SFT, DPO and evaluate take them too, to train and
    measure the model RL starts from). A row's images go through the model's processor
    (alignment.datasets.images) into a vision-language model; with --max_images_per_prompt 0 (text only) the
    flags change nothing."""

    @property
    def with_images(self) -> bool:
        return self.data.max_images_per_prompt > 0

    def frozen_visual_encoder(self) -> bool:
        """--freeze_visual_encoder, for a stage that has it (the stage's own group names it)."""
        return bool(getattr(self, "freeze_visual_encoder", False))

    def check_vision(self) -> None:
        require(
            self.data.max_images_per_prompt >= 0,
            f"--max_images_per_prompt {self.data.max_images_per_prompt}: must be >= 0",
        )
        if not self.with_images:
            require(
                not self.frozen_visual_encoder(),
                "--freeze_visual_encoder freezes a vision-language model's image encoder, which is used only with "
                "--max_images_per_prompt >= 1: add that or drop the flag",
            )
            return only_with(self, "max_images_per_prompt", "image_key")
        # as OpenRLHF: a packed row holds several samples, and the images would have to follow their samples into
        # it; vision-language models also place their own positions (Qwen's M-RoPE)
        require(
            not getattr(self, "packing_samples", False),
            "--packing_samples with images (--max_images_per_prompt > 0): packing is not built for vision-language "
            "models; drop --packing_samples",
        )


@dataclass(frozen=True)
class VisionActor:
    """`actor` settings; VisionConfig checks them."""

    freeze_visual_encoder: bool = opt(
        False, "Train only the language model of a vision-language actor", dotted="actor.freeze_visual_encoder"
    )


class VisionConfig(VisionDataConfig):
    """PPO's: OpenRLHF v0.11's --actor.freeze_visual_encoder besides the image flags."""

    def check_vision_rl(self) -> None:
        """Images in RL prompts: the parts of RL built for vision-language models (docs/vision.md). Mixed into
        PPOConfig only, whose fields it reads."""
        if not self.with_images:
            return
        images = f"--max_images_per_prompt {self.data.max_images_per_prompt}"
        require(
            not self.uses_critic(),
            f"{images} with --advantage_estimator {self.algo.advantage.estimator}: a critic is not built for "
            f"vision-language models (as in OpenRLHF); use group_norm, rloo, reinforce_baseline or dr_grpo",
        )
        require(
            not self.reward.model_name_or_path or bool(self.reward.remote_url),
            f"{images} with --reward_pretrain: a reward model reads the text alone and would score without the "
            f"images; use --remote_rm_url (a reward_func file or a server)",
        )
        require(
            not self.train.partial_rollout_enable,
            f"{images} with --partial_rollout_enable: generations paused at a weight sync are not built for "
            f"images; drop --partial_rollout_enable",
        )


@dataclass(frozen=True)
class TrainedVision:
    """`model` settings; TrainedVisionConfig checks them."""

    freeze_visual_encoder: bool = opt(
        False, "Train only the language model of a vision-language model", dotted="model.freeze_visual_encoder"
    )


class TrainedVisionConfig(VisionDataConfig):
    """SFT's and DPO's: the image flags, and freezing the image encoder of the model they train."""
