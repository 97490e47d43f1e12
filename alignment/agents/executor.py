"""The default way an episode runs (OpenRLHF's MultiTurnAgentExecutor, token in, token out): the model's
turn is generated from the whole context so far, the environment answers it, and its feedback is appended
as tokens, until the environment says done, --agent_max_turns turns were taken, or the context reaches
max_length. The context is kept as token ids — never re-tokenized from text — so what the trainer scores
is exactly what the engine sampled.

Rewards of all turns add up to the episode's reward (so rewards may come per turn or only at the end);
the score (for dynamic filtering) and extra_logs are the last turn's.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from alignment.agents.contract import AgentError, AgentExecutorBase, AgentInstanceBase, StepResult, observation
from alignment.agents.llm import SamplingParams, as_params, encoded
from alignment.datasets.images import RowImages, processor_of
from alignment.datasets.sources import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


async def make_instance(cls: type) -> AgentInstanceBase:
    """OpenRLHF's older example files declare `async def __init__`; both kinds are built here."""
    if inspect.iscoroutinefunction(cls.__init__):
        obj = cls.__new__(cls)
        await cls.__init__(obj)
        return obj
    return cls()


def episode(
    prompt: str,
    label: Any,
    total: float,
    last: StepResult,
    tokens: list[int],
    ranges: list[tuple[int, int]],
    logprobs: list[float] | None,
    seen: int,
) -> dict:
    """The episode as the trainer reads it: the turns' summed reward, the last turn's score and logs."""
    return {
        "prompt": prompt,
        "label": label,
        "reward": total,
        "scores": total if last.score is None else last.score,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": logprobs,
        "extra_logs": last.extra_logs,
        "done": last.done,
        "updates_seen": seen,
    }


class MultiTurnAgentExecutor(AgentExecutorBase):
    def __init__(self, agent_instance_cls: type, max_turns: int = 16, step_timeout: float = 60.0, where: str = "agent"):
        if not (isinstance(agent_instance_cls, type) and callable(getattr(agent_instance_cls, "step", None))):
            raise AgentError(f"{where}: AgentInstance must be a class with async reset(states) and step(states)")
        self.cls, self.max_turns, self.step_timeout, self.where = agent_instance_cls, max_turns, step_timeout, where

    async def execute(
        self,
        prompt: str,
        label: Any,
        sampling_params: SamplingParams,
        max_length: int,
        hf_tokenizer: PreTrainedTokenizerBase,
        llm_engine: Any,
        images: list | None = None,
        prompt_ids: list[int] | None = None,
    ) -> dict:
        """`images`: the prompt's (a vision-language policy's), in the order of its placeholders; an environment's
        `environment_images` join them for the turns after, each expanded where its feedback places it.
        `prompt_ids`: the prompt as the dataset tokenized it, used when reset leaves the observation unchanged."""
        env = await make_instance(self.cls)
        text = observation(await env.reset({"observation": prompt, "label": label}), self.where)
        shown = list(images or [])
        tokens = (
            list(prompt_ids)
            if prompt_ids is not None and text == prompt
            else self._ids(hf_tokenizer, text, shown, "the observation reset returned")
        )
        params = as_params(sampling_params)
        turn_cap = params.max_tokens
        ranges: list[tuple[int, int]] = []
        logprobs: list[float] | None = [0.0] * len(tokens) if params.logprobs is not None else None
        total, last, seen = 0.0, StepResult(0.0, None, "", False), 0
        while len(ranges) < self.max_turns and len(tokens) < max_length:
            params.max_tokens = min(turn_cap, max_length - len(tokens))
            seen_images = {"image": shown} if shown else None
            out = (await llm_engine.generate(tokens, replace(params), multi_modal_data=seen_images)).outputs[0]
            ranges.append((len(tokens), len(tokens) + len(out.token_ids)))
            seen += getattr(out, "updates_seen", 0)  # weight updates that landed mid-turn (partial rollouts)
            tokens = tokens + list(out.token_ids)
            if logprobs is not None:
                logprobs += [d[t].logprob for d, t in zip(out.logprobs, out.token_ids)]
            states = {"observation_text": text, "action_text": out.text, "label": label, "sampling_params": params}
            last = await self._step(env, states, len(ranges))
            total += last.reward
            text = text + out.text + last.feedback
            if last.done:
                break
            where = f"{self.where} (turn {len(ranges)}): environment_feedback"
            feedback = self._ids(hf_tokenizer, last.feedback, last.images, where) if last.feedback else []
            shown += last.images
            tokens = tokens + feedback
            if logprobs is not None:
                logprobs += [0.0] * len(feedback)
            if last.sampling_params is not None:
                params = as_params(last.sampling_params)
                turn_cap = params.max_tokens
        return episode(prompt, label, total, last, tokens, ranges, logprobs, seen)

    def _ids(self, tok: PreTrainedTokenizerBase, text: str, images: list, where: str) -> list[int]:
        """`text`'s ids; with images, each placeholder expanded to its image's tokens by the model's processor."""
        if not images:
            return tok(text, add_special_tokens=False)["input_ids"]
        processor = processor_of(tok)
        if processor is None:
            raise AgentError(
                f"{self.where}: the environment returned images, but the policy is a text-only model; train a "
                f"vision-language model or return text feedback only"
            )
        placed = RowImages(processor, [encoded(i) for i in images], where)
        try:
            ids = placed.ids(tok, text)
            placed.check_all_used()
        except DataError as e:
            raise AgentError(str(e)) from None
        return list(ids)

    async def _step(self, env: AgentInstanceBase, states: dict, turn: int) -> StepResult:
        try:
            out = await asyncio.wait_for(env.step(states), self.step_timeout)
        except asyncio.TimeoutError:
            raise AgentError(
                f"{self.where}: step of turn {turn} did not return within --agent_step_timeout "
                f"{self.step_timeout:g} s; make it faster or raise the timeout"
            ) from None
        return StepResult.of(out, f"{self.where} (turn {turn})")
