"""What goes into and comes out of a rollout engine (HF or vLLM): token ids, no tensors, so the
same objects cross Ray's object store between the engines and the trainers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1  # samples per prompt (--n_samples_per_prompt)
    greedy: bool = False  # argmax decoding (evaluation, weight-sync checks)
    seed: int | None = None
    logprobs: bool = False  # also return each sampled token's log-prob (the behaviour policy's, --async_train)
    # --max_len: most prompt + response tokens; a response gets min(max_new_tokens, max_total_len - its prompt's)
    max_total_len: int | None = None

    def budget(self, prompt_len: int) -> int:
        """Most new tokens for a prompt of `prompt_len` tokens (at least 1: longer prompts were dropped)."""
        if self.max_total_len is None:
            return self.max_new_tokens
        return max(1, min(self.max_new_tokens, self.max_total_len - prompt_len))

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"SamplingParams: max_new_tokens {self.max_new_tokens} and n {self.n} must be >= 1")
        if not self.greedy and not (self.temperature > 0 and 0 < self.top_p <= 1):
            raise ValueError(
                f"SamplingParams: temperature {self.temperature} must be > 0 and top_p {self.top_p} in (0, 1]"
            )


@dataclass
class Rollout:
    """Responses to a list of prompts: `n` consecutive entries per prompt, in prompt order."""

    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)  # eos included when the model stopped
    prompt_index: list[int] = field(default_factory=list)  # which input prompt each response answers
    finished: list[bool] = field(default_factory=list)  # ended with eos (not cut at max_new_tokens)
    logprobs: list[list[float]] = field(default_factory=list)  # per response token, when SamplingParams.logprobs
    # per response token: 1 = the model's, 0 = an environment's feedback between turns (agents: context, never
    # loss). Empty: every response token is the model's (single-turn generation).
    loss_mask: list[list[int]] = field(default_factory=list)
    # --partial_rollout_enable: weight updates applied while each response was being generated (empty: none asked)
    updates_seen: list[int] = field(default_factory=list)
    # the policy version (weight syncs so far) each response was begun under (empty: not recorded; the PPO
    # controller records it): with --async_train, how stale a sample is when it trains
    versions: list[int] = field(default_factory=list)
    # a vision-language prompt's images (encoded files), per response (empty: text prompts)
    images: list[list[bytes]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.response_ids)

    def extend(self, other: "Rollout", index_offset: int = 0) -> None:
        self.prompt_ids += other.prompt_ids
        self.response_ids += other.response_ids
        self.prompt_index += [i + index_offset for i in other.prompt_index]
        self.finished += other.finished
        self.logprobs += other.logprobs
        self.updates_seen += other.updates_seen
        self.versions += other.versions
        self.images += other.images
        if self.loss_mask or other.loss_mask:  # a mix keeps one mask row per response
            self.loss_mask = (self.loss_mask or [[1] * len(r) for r in self.response_ids[: len(self) - len(other)]]) + (
                other.loss_mask or [[1] * len(r) for r in other.response_ids]
            )

    def rows(self, idx: list[int]) -> "Rollout":
        """These responses (prompt_index kept)."""
        pick = lambda xs: [xs[i] for i in idx] if xs else []  # noqa: E731
        return Rollout(
            pick(self.prompt_ids),
            pick(self.response_ids),
            pick(self.prompt_index),
            pick(self.finished),
            pick(self.logprobs),
            pick(self.loss_mask),
            pick(self.updates_seen),
            pick(self.versions),
            pick(self.images),
        )

    def response_mask(self, i: int) -> list[int]:
        return self.loss_mask[i] if self.loss_mask else [1] * len(self.response_ids[i])

    def response_tokens(self) -> int:
        return sum(len(r) for r in self.response_ids)
