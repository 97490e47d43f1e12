"""What an agent's executor talks to as `llm_engine`: vLLM's request/response shapes (token ids in, token ids,
text and per-token log-probs out), so executors written against vLLM's objects run unchanged.

Every live episode's `generate` call is queued; when each live episode is either waiting on the engine or
finished, the queue goes to the rollout engines as one batch (grouped by sampling settings). So episodes run
concurrently as asyncio tasks, and the engines see batches as large as the number of live episodes, not one
request at a time.

That lock-step is reproducible (a batch's rows and seed depend on nothing but the episodes) but makes every
episode wait for the slowest environment step of the turn. With `linger_s` (--agent_batch_linger_ms) a batch
also goes once its first request has waited that long, and it is generated on a worker thread while the
environments' steps go on: a slow step holds only its own episode, as with OpenRLHF's per-request vLLM calls.
Which requests share a batch then depends on timing, so a rerun samples other tokens.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from alignment.datasets.image_rows import encode_png
from alignment.datasets.images import PromptImages, processor_of, read_bytes
from alignment.rollout.types import Rollout
from alignment.rollout.types import SamplingParams as EngineParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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


# (prompt token ids, engine params per prompt, each prompt's images or None) -> one Rollout, n=1 per prompt,
# in order
GenerateBatch = Callable[[list[list[int]], EngineParams, "list[PromptImages] | None"], Rollout]


class BatchingEngine:
    def __init__(
        self,
        generate_batch: GenerateBatch,
        tokenizer: PreTrainedTokenizerBase,
        seed: int,
        greedy: bool = False,
        linger_s: float | None = None,
    ):
        self.generate_batch, self.tokenizer, self.seed, self.greedy = generate_batch, tokenizer, seed, greedy
        self.linger_s = linger_s  # None: lock-step; else streaming (module docstring)
        self.live = 0
        self.closed = False  # an episode failed: the run stops, nothing more is generated
        self.queue: list[tuple[list[int], SamplingParams, asyncio.Future, tuple[bytes, ...]]] = []
        self.processor = processor_of(tokenizer)  # a vision-language policy's: contexts with images
        self.batches = 0
        self.generating: asyncio.Task | None = None  # streaming: the batch on the worker thread
        self.paused = False  # an episode pool between iterations: requests wait, the trainer has the model
        self.first_queued = 0.0  # streaming: when the oldest waiting request came (event-loop time)
        self.timer: asyncio.TimerHandle | None = None

    def unpause(self) -> None:
        """Generate again (an episode pool's iteration collects: alignment/agents/pool.py)."""
        self.paused = False
        self._flush_if_ready()

    async def pause(self) -> None:
        """Generate nothing more until unpause; returns once the batch in generation, if any, is answered."""
        self.paused = True
        if self.generating is not None:
            await asyncio.shield(self.generating)

    def episode_started(self) -> None:
        self.live += 1

    def episode_ended(self) -> None:
        self.live -= 1
        self._flush_if_ready()

    async def generate(self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> RequestOutput:
        """One turn. `multi_modal_data`: vLLM's {"image": [...]} (OpenRLHF v0.11's executors pass it, None for
        text): every image of the context, in the order of its placeholders, which `token_ids` hold expanded."""
        return await self.submit(token_ids, sampling_params, image_files(multi_modal_data))

    async def submit(self, token_ids: list[int], sampling_params: Any, files: tuple[bytes, ...]) -> RequestOutput:
        """`generate` with the context's images as encoded files."""
        if files and self.processor is None:
            raise ValueError(
                "llm_engine.generate got images, but the policy is a text-only model; train a vision-language "
                "model (its folder's config has a vision_config) or generate from text only"
            )
        params = as_params(sampling_params)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self.queue:
            self.first_queued = loop.time()
        self.queue.append((list(token_ids), params, future, files))
        self._flush_if_ready()
        return await future

    def _flush_if_ready(self) -> None:
        if self.closed or self.paused or not self.queue:
            return
        everyone = len(self.queue) >= self.live  # every live episode waits on the engine
        if self.linger_s is None:
            if everyone:
                queue, self.queue = self.queue, []
                try:
                    outs: list[Rollout] | Exception = [self.generate_batch(*call) for call in self._calls(queue)]
                except Exception as e:  # the engine's error goes to the episodes waiting on it
                    outs = e
                self._answer(queue, outs)
            return
        if self.generating is not None:  # the next batch goes when this one is done
            return
        loop = asyncio.get_running_loop()
        due = self.first_queued + self.linger_s
        if not everyone and loop.time() < due:
            if self.timer is None:
                self.timer = loop.call_at(due, self._lingered)
            return
        queue, self.queue = self.queue, []
        self.generating = asyncio.ensure_future(self._stream(queue))

    def _lingered(self) -> None:
        self.timer = None
        self._flush_if_ready()

    async def _stream(self, queue: list) -> None:
        """Streaming: one batch generated on a worker thread while the event loop runs the environments."""
        loop = asyncio.get_running_loop()
        try:
            outs = [await loop.run_in_executor(None, self.generate_batch, *call) for call in self._calls(queue)]
            self._answer(queue, outs)
        except Exception as e:  # the engine's error goes to the episodes waiting on it
            self._answer(queue, e)
        finally:
            self.generating = None
        self._flush_if_ready()  # the requests that queued meanwhile, if due

    def _groups(self, queue: list) -> dict[tuple, list[int]]:
        groups: dict[tuple, list[int]] = {}
        for k, (_, p, _, files) in enumerate(queue):  # contexts with images apart: an engine call is one or other
            groups.setdefault((p.max_tokens, p.temperature, p.top_p, p.logprobs is not None, bool(files)), []).append(k)
        return groups

    def _calls(self, queue: list) -> list[tuple[list[list[int]], EngineParams, list[PromptImages] | None]]:
        """The engine calls for a queue: one per sampling setting, each with its own seed."""
        calls = []
        for (max_tokens, temperature, top_p, logprobs, with_images), rows in self._groups(queue).items():
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
            # no placeholder form: a context built turn by turn never had one; a vLLM engine, the one engine that
            # needs it, derives it (datasets.images.placeholder_form)
            images = [PromptImages(queue[k][3], ()) for k in rows] if with_images else None
            calls.append(([queue[k][0] for k in rows], params, images))
        return calls

    def _answer(self, queue: list, outs: list[Rollout] | Exception) -> None:
        """Each waiting request's completion, or the engine's error for every one of them."""
        if isinstance(outs, Exception):
            for _, _, future, _ in queue:
                if not future.done():
                    future.set_exception(outs)
            return
        for out, ((*_, logprobs, _), rows) in zip(outs, self._groups(queue).items()):
            for j, k in enumerate(rows):
                if not queue[k][2].done():  # an episode cancelled meanwhile (the run stops) gets nothing
                    queue[k][2].set_result(self._request_output(queue[k][0], out, j, logprobs))

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


def image_files(multi_modal_data: Any) -> tuple[bytes, ...]:
    """vLLM's {"image": image or [images]} (PIL images, encoded files or paths) as encoded files; () for None."""
    if not multi_modal_data:
        return ()
    if not isinstance(multi_modal_data, dict) or set(multi_modal_data) - {"image"}:
        raise ValueError(
            f"multi_modal_data must be {{'image': [images]}} (images only), got {type(multi_modal_data).__name__} "
            f"with {sorted(multi_modal_data) if isinstance(multi_modal_data, dict) else '-'}"
        )
    images = multi_modal_data["image"]
    images = images if isinstance(images, (list, tuple)) else [images]
    return tuple(encoded(i) for i in images)


def encoded(image: Any) -> bytes:
    """A PIL image, an encoded file's bytes, or a path / URI to one, as the file's bytes."""
    if isinstance(image, bytes):
        return image
    if isinstance(image, str):
        return read_bytes(image)
    if hasattr(image, "save"):
        return encode_png(image)
    raise ValueError(f"an image must be a PIL image, bytes or a path, got {type(image).__name__}")
