"""What an agent's executor talks to as `llm_engine`: vLLM's request/response shapes (token ids in, token ids,
text and per-token log-probs out), so executors written against vLLM's objects run unchanged.

Every live episode's `generate` call is queued; when each live episode is either waiting on the engine or
finished, the queue goes to the rollout engines as one batch (grouped by sampling settings). So episodes run
concurrently as asyncio tasks, and the engines see batches as large as the number of live episodes, not one
request at a time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from alignment.rollout.types import Rollout
from alignment.rollout.types import SamplingParams as EngineParams


@dataclass
class SamplingParams:
    """vLLM's names for the settings of one turn; a step may return a changed copy for the next turn."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    logprobs: int | None = None  # not None: return each sampled token's log-prob
    n: int = 1


@dataclass(frozen=True)
class Logprob:
    logprob: float


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str  # "stop" (eos) or "length"
    updates_seen: int = 0  # --partial_rollout_enable: weight updates applied while this turn was generated


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[Completion] = field(default_factory=list)


# (prompt token ids, engine params per prompt) -> one Rollout, n=1 per prompt, in order
GenerateBatch = Callable[[list[list[int]], EngineParams], Rollout]


class BatchingEngine:
    def __init__(self, generate_batch: GenerateBatch, tokenizer: Any, seed: int, greedy: bool = False):
        self.generate_batch, self.tokenizer, self.seed, self.greedy = generate_batch, tokenizer, seed, greedy
        self.live = 0
        self.closed = False  # an episode failed: the run stops, nothing more is generated
        self.queue: list[tuple[list[int], SamplingParams, asyncio.Future]] = []
        self.batches = 0

    def episode_started(self) -> None:
        self.live += 1

    def episode_ended(self) -> None:
        self.live -= 1
        self._flush_if_ready()

    async def generate(self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> RequestOutput:
        """One turn. `multi_modal_data` (OpenRLHF v0.11's executors pass it, None for text): images are refused."""
        if multi_modal_data:
            raise ValueError(
                "llm_engine.generate got multi_modal_data (images): vision-language RLHF is not built in alignflow "
                "yet; generate from text only"
            )
        params = as_params(sampling_params)
        future = asyncio.get_running_loop().create_future()
        self.queue.append((list(token_ids), params, future))
        self._flush_if_ready()
        return await future

    def _flush_if_ready(self) -> None:
        if self.closed or not self.queue or len(self.queue) < self.live:
            return
        queue, self.queue = self.queue, []
        groups: dict[tuple, list[int]] = {}
        for k, (_, p, _) in enumerate(queue):
            groups.setdefault((p.max_tokens, p.temperature, p.top_p, p.logprobs is not None), []).append(k)
        try:
            for (max_tokens, temperature, top_p, logprobs), rows in groups.items():
                self.batches += 1
                params = EngineParams(
                    max_tokens,
                    temperature,
                    top_p,
                    1,
                    greedy=self.greedy,
                    seed=self.seed * 1_000_003 + self.batches,
                    logprobs=logprobs,
                )
                out = self.generate_batch([queue[k][0] for k in rows], params)
                for j, k in enumerate(rows):
                    queue[k][2].set_result(self._request_output(queue[k][0], out, j, logprobs))
        except Exception as e:  # every waiting episode fails with the engine's error
            for _, _, future in queue:
                if not future.done():
                    future.set_exception(e)

    def _request_output(self, prompt: list[int], out: Rollout, j: int, logprobs: bool) -> RequestOutput:
        ids = out.response_ids[j]
        lps = [{t: Logprob(lp)} for t, lp in zip(ids, out.logprobs[j])] if logprobs else None
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        seen = out.updates_seen[j] if out.updates_seen else 0
        return RequestOutput(prompt, [Completion(ids, text, lps, "stop" if out.finished[j] else "length", seen)])


def as_params(p: Any) -> SamplingParams:
    """A turn's settings from our SamplingParams, a dict, or any object with vLLM's attribute names."""
    if isinstance(p, SamplingParams):
        return replace(p)
    get = p.get if isinstance(p, dict) else (lambda k, d=None: getattr(p, k, d))
    if get("max_tokens") is None:
        raise TypeError(f"sampling_params {p!r} has no max_tokens; pass the SamplingParams the step was given")
    return SamplingParams(
        int(get("max_tokens")),
        float(get("temperature", 1.0)),
        float(get("top_p", 1.0)),
        get("logprobs"),
        int(get("n", 1) or 1),
    )
