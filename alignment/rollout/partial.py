"""--partial_rollout_enable (OpenRLHF's --train.partial_rollout_enable, with --async_train): a weight update that
reaches a vLLM engine while it generates is applied between two of its decoding steps instead of waiting for
the generation to end. The responses in flight finish on the new weights (their earlier tokens and KV cache
came from the old ones), so the trainer waits less for a sync and the samples are fresher; each response
records how many updates it saw mid-way (Rollout.updates_seen), logged as train/partial/*.

The engine is one resource shared by the threads of its Ray actor (max_concurrency 4): the generation
that steps it, and the weight sync that posts new weights. `busy` says who holds it; weights posted while
it is busy wait in `pending` (the newest replaces an older one: each is the whole policy) and are applied by
the holder between steps or before it lets go.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from alignment.rollout.types import SamplingParams

if TYPE_CHECKING:
    from vllm import LLM, RequestOutput
    from vllm import SamplingParams as VLLMSamplingParams


class EngineTurns:
    """Who uses the engine now, and the weights waiting for it."""

    def __init__(self, load: Callable[[list], int]):
        self.load = load  # applies a list of weight chunks to the engine
        self.cv = threading.Condition()
        self.busy = False
        self.pending: list | None = None

    def claim(self) -> None:
        with self.cv:
            while self.busy:
                self.cv.wait()
            self.busy = True

    def take(self) -> list | None:
        with self.cv:
            parts, self.pending = self.pending, None
        return parts

    def apply_pending(self) -> bool:
        """The holder applies weights posted meanwhile; True when there were any."""
        parts = self.take()
        if parts is not None:
            self.load(parts)
        return parts is not None

    def release(self) -> None:
        while True:
            with self.cv:
                parts, self.pending = self.pending, None
                if parts is None:
                    self.busy = False
                    self.cv.notify_all()
                    return
            self.load(parts)

    def post(self, parts: list) -> bool:
        """New weights: applied now when the engine is free (True), else left for its holder (False)."""
        with self.cv:
            if self.busy:
                self.pending = parts
                return False
            self.busy = True
        try:
            self.load(parts)
        finally:
            self.release()
        return True


def step_generate(
    llm: LLM,
    turns: EngineTurns,
    prompts: list[list[int]],
    params: SamplingParams,
    sampling: Callable[[int], VLLMSamplingParams],
) -> tuple[list[RequestOutput], list[int]]:
    """Generate by stepping vLLM's engine, applying posted weights between steps: (vLLM's outputs in prompt
    order, the updates each prompt's request saw). `sampling(max_tokens)` builds vLLM's SamplingParams."""
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    seen = [0] * len(prompts)
    tag = f"partial-{id(prompts)}"
    for k, p in enumerate(prompts):
        sp = sampling(params.budget(len(p)))
        sp.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, all n samples, when it ends
        engine.add_request(f"{tag}-{k}", TokensPrompt(prompt_token_ids=list(p)), sp)
    done: dict[int, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[int(out.request_id.rsplit("-", 1)[1])] = out
        if turns.apply_pending():
            for k in range(len(prompts)):
                seen[k] += k not in done
    return [done[k] for k in range(len(prompts))], seen
