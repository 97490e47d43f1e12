"""What several flows share, kept here so that no flow imports another (each flow file is a Prefect entrypoint
loaded under one name): the SFT steps a flow that trains its own policy starts with (`sft`, `sft-rm-ppo`,
`sft-grpo`, `sft-dpo`, `distill`), and whether an RL stage brings its own reward."""

from __future__ import annotations

from typing import Any

from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.recipes import Recipe
from alignment.config import PPOConfig, SFTConfig, load_yaml


def sft_steps(recipe: Recipe, sft: dict[str, Any]) -> list[Step]:
    """[tiny_base,] sft: the SFT stage, after the tiny world's base when the recipe makes one (`makes_base`)."""
    if makes_base(recipe, sft):
        return [
            Step("tiny_base", "tiny_base", "tiny_base"),
            Step("sft", "sft", "sft", sft, {"pretrain": Output("tiny_base")}),
        ]
    return [Step("sft", "sft", "sft", sft)]


def makes_base(recipe: Recipe, sft: dict[str, Any]) -> bool:
    """The recipe makes its own base model (`tiny_base.yaml`) and neither it nor the run gives SFT a `pretrain`."""
    return recipe.has("tiny_base") and not given_pretrain(recipe, sft)


def given_pretrain(recipe: Recipe, sft: dict[str, Any]) -> str | None:
    """The model SFT starts from as the run's `sft` parameters or the recipe's sft.yaml give it, if they do."""
    sft_file = recipe.file("sft")
    return sft.get("pretrain") or (sft_file and load_yaml(SFTConfig, sft_file).get("pretrain")) or None


def own_reward(ppo_config_file: str | None, ppo: dict) -> bool:
    """PPO was given its reward (`reward_pretrain`, `remote_rm_url` or an agent environment, `agent_func_path`,
    in the overrides or the config file)."""
    configured = load_yaml(PPOConfig, ppo_config_file) if ppo_config_file else {}
    # an override, None included, replaces the file's value
    return any(
        ppo[k] if k in ppo else configured.get(k) for k in ("reward_pretrain", "remote_rm_url", "agent_func_path")
    )
