"""Rule-based reward for the arithmetic task: 1.0 when the response's final number is the label.

Signature follows OpenRLHF's `reward_func(queries, prompts, labels)`: `queries` are
prompt + response strings, so the response is the part after its prompt.
"""
from __future__ import annotations

import re

_INT = re.compile(r"-?\d+")
_TURN_END = "<|end|>"


def extract_answer(response: str) -> int | None:
    """The last integer before the end of the assistant turn; None when there is none."""
    response = response.split(_TURN_END, 1)[0]
    found = _INT.findall(response)
    return int(found[-1]) if found else None


def score(response: str, label: str | int) -> float:
    answer = extract_answer(response)
    return 1.0 if answer is not None and answer == int(label) else 0.0


def reward_func(queries: list[str], prompts: list[str], labels: list[str]) -> list[float]:
    if not (len(queries) == len(prompts) == len(labels)):
        raise ValueError(f"reward_func: got {len(queries)} queries, {len(prompts)} prompts, "
                         f"{len(labels)} labels; pass one prompt and label per query")
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):] if query.startswith(prompt) else query
        rewards.append(score(response, label))
    return rewards
