"""Where rewards come from: the flags every stage that scores text shares (train_ppo_ray, batch_inference,
serve_rm). Names are OpenRLHF's flat flag names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from alignment.config.base import opt, require


@dataclass(frozen=True)
class RewardSource:
    """`reward` settings; RewardSourceConfig checks them."""

    model_name_or_path: Optional[str] = opt(
        None,
        "Reward model(s), comma-separated (directories, store URIs, hub names)",
        path="model",
        dotted="reward.model_name_or_path",
        flat="reward_pretrain",
    )
    reward_weights: Optional[str] = opt(None, "Comma-separated weights of the reward models (default: equal)")
    remote_url: Optional[str] = opt(
        None,
        "Comma-separated reward-server URLs (POST {query, prompts, labels}), "
        "or a .py file defining reward_func(queries, prompts, labels)",
        path="reward",
        dotted="reward.remote_url",
        flat="remote_rm_url",
    )
    normalize_enable: bool = opt(
        False,
        "Normalise RM scores with the mean/std in the RM's config.json (PPO with a "
        "reward function, server or agent: by the running mean/std of the rewards)",
        dotted="reward.normalize_enable",
        flat="normalize_reward",
    )


@dataclass(frozen=True)
class RewardSourceDS:
    """`ds` settings; RewardSourceConfig checks them."""

    value_head_prefix: str = opt(
        "score", "Name of the value head in reward/critic checkpoints", dotted="ds.value_head_prefix"
    )


class RewardSourceConfig:
    """Where rewards come from (train_ppo_ray, batch_inference, serve_rm): trained reward models
    and/or reward servers or a reward_func file."""

    # PPO normalises a source without saved statistics by running moments (alignment/losses/reward_norm.py)
    running_reward_norm: ClassVar[bool] = False

    def has_reward(self) -> bool:
        return bool(self.reward.model_name_or_path or self.reward.remote_url)

    def check_reward_source(self) -> None:
        if self.reward.reward_weights:
            n = len(self.reward.model_name_or_path.split(",")) if self.reward.model_name_or_path else 0
            try:
                weights = [float(w) for w in self.reward.reward_weights.split(",")]
            except ValueError:
                weights = []
            require(
                len(weights) == n,
                f"--reward_weights {self.reward.reward_weights!r}: give one number per --reward_pretrain model ({n})",
            )
            # float() takes nan and inf: a NaN weight makes every reward NaN at the first scored batch
            require(
                all(math.isfinite(w) for w in weights),
                f"--reward_weights {self.reward.reward_weights!r}: every weight must be a finite number, e.g. 1.0,0.5",
            )
        # a reward server or function has no saved mean/std: outside PPO (running moments) the flag would do nothing
        require(
            not self.reward.normalize_enable or bool(self.reward.model_name_or_path) or self.running_reward_norm,
            "--normalize_reward normalises reward models' scores by the mean/std their training saved; "
            "with only --remote_rm_url there is none: drop --normalize_reward",
        )
