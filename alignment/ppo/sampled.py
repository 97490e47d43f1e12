"""What an iteration samples, as the controller (alignment/ppo/controller.py) passes it on: the rows, their scores
where their source gave them, and the policy version that began each."""

from __future__ import annotations

from dataclasses import dataclass, field

from alignment.agents.runner import Episodes
from alignment.datasets.prompts import PromptSample
from alignment.ppo.pending import Pending
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout


@dataclass
class Sampled:
    """An iteration's samples; `scored` when their source scored them already (an agent's environment);
    `prompts` when they are not the prompts the iteration asked for (an episode pool's groups)."""

    rollout: Rollout
    scored: Scored | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    prompts: list[PromptSample] | None = None


@dataclass
class Generation:
    prompts: list[PromptSample]
    sampled: Pending[Sampled]
    version: int  # PPOController.synced when it started: the policy that samples


def stamped(sampled: Sampled, version: int) -> Sampled:
    """The samples with the policy version that began them (Rollout.versions)."""
    sampled.rollout.versions = [version] * len(sampled.rollout)
    return sampled


def of_episodes(got: Episodes) -> Sampled:
    """An agent's episodes as samples (an episode pool's carry the prompts they belong to)."""
    return Sampled(got.rollout, got.scored, got.metrics, got.prompts)
