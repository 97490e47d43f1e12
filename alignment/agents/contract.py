"""The agent contract (OpenRLHF's `openrlhf.utils.agent`), and the checks that turn a user file's mistakes
into one line naming the file and the episode.

An `AgentInstance` is one episode's environment: `await reset({"observation": prompt, "label": label})`
returns `{"observation": text}`; after each model turn `await step(states)` gets `observation_text` (the
context so far), `action_text` (the turn), `label` and `sampling_params`, and returns
`{"rewards", "scores", "environment_feedback", "done", "sampling_params", "extra_logs"}`, and with a
vision-language policy `environment_images` (one placeholder each in the feedback, where it goes).
An optional `AgentExecutor` replaces how an episode runs (`execute(...)` returns the episode dict that
`Episode.of` reads).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alignment.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from alignment.agents.llm import SamplingParams


class AgentError(UserError, RuntimeError):
    """An agent file failed or answered something unusable; the message names the file and the episode."""


class AgentInstanceBase(ABC):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        return states

    @abstractmethod
    async def step(self, states: dict, **kwargs: Any) -> dict:
        raise NotImplementedError("AgentInstance.step is not implemented")


class AgentExecutorBase(ABC):
    @abstractmethod
    async def execute(
        self,
        prompt: str,
        label: Any,
        sampling_params: SamplingParams,
        max_length: int,
        hf_tokenizer: PreTrainedTokenizerBase,
        llm_engine: Any,
        images: list | None = None,
    ) -> dict:
        raise NotImplementedError("AgentExecutorBase.execute is not implemented")


def number(value: Any, what: str) -> float:
    """A finite float from a number, a one-element tensor or list; AgentError otherwise."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AgentError(f"{what} must be one finite number, got {value!r}")
    return float(value)


def flag(value: Any, what: str) -> bool:
    """A bool from True/False, 0/1 or a one-element tensor."""
    return value if isinstance(value, bool) else number(value, what) != 0


@dataclass
class StepResult:
    """What one `step` returned."""

    reward: float
    score: float | None
    feedback: str
    done: bool
    sampling_params: Any = None
    extra_logs: dict[str, float] = field(default_factory=dict)
    images: list = field(default_factory=list)  # environment_images: placed by the feedback's placeholders

    @staticmethod
    def of(out: Any, where: str) -> "StepResult":
        if not isinstance(out, dict):
            raise AgentError(
                f"{where}: step returned {type(out).__name__}; return a dict with rewards, "
                f"environment_feedback and done"
            )
        missing = [k for k in ("rewards", "environment_feedback", "done") if k not in out]
        if missing:
            raise AgentError(f"{where}: step's dict lacks {missing}; it has {sorted(out)}")
        feedback = out["environment_feedback"]
        if not isinstance(feedback, str):
            raise AgentError(f"{where}: environment_feedback must be text, got {type(feedback).__name__}")
        images = out.get("environment_images") or []
        if not isinstance(images, (list, tuple)):
            raise AgentError(f"{where}: environment_images must be a list of images, got {type(images).__name__}")
        score = out.get("scores")
        return StepResult(
            number(out["rewards"], f"{where}: rewards"),
            None if score is None else number(score, f"{where}: scores"),
            feedback,
            flag(out["done"], f"{where}: done"),
            out.get("sampling_params"),
            extra_logs(out.get("extra_logs"), where),
            list(images),
        )


def observation(first: Any, where: str) -> str:
    """The text `reset` returned; AgentError when it is not {"observation": text}."""
    if not isinstance(first, dict) or not isinstance(first.get("observation"), str):
        raise AgentError(f"{where}: reset must return {{'observation': text}}, got {first!r:.200}")
    return first["observation"]


def extra_logs(logs: Any, where: str) -> dict[str, float]:
    if logs is None:
        return {}
    if not isinstance(logs, dict):
        raise AgentError(f"{where}: extra_logs must be a dict of name: number, got {type(logs).__name__}")
    return {str(k): number(v, f"{where}: extra_logs[{k!r}]") for k, v in logs.items()}
