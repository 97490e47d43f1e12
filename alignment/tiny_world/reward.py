"""Rule-based reward for the arithmetic task: 1.0 when the response's final number is the label.

Signature follows OpenRLHF's `reward_func(queries, prompts, labels)`: `queries` are
prompt + response strings, so the response is the part after its prompt. A missing label
(None: no --label_key) is computed from the question in the prompt, so responses without an
answer column (e.g. the unpaired data, for conditional SFT) can be scored too.
"""

from __future__ import annotations

import re

from alignment.tiny_world.arithmetic import Problem

_INT = re.compile(r"-?\d+")
_TURN_END = "<|end|>"
_QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")


def extract_answer(response: str) -> int | None:
    """The last integer before the end of the assistant turn; None when there is none."""
    response = response.split(_TURN_END, 1)[0]
    found = _INT.findall(response)
    return int(found[-1]) if found else None


def score(response: str, label: str | int) -> float:
    answer = extract_answer(response)
    return 1.0 if answer is not None and answer == int(label) else 0.0


def answer_from_prompt(prompt: str) -> int:
    """The answer to the last "What is a op b?" in the prompt."""
    found = _QUESTION.findall(prompt)
    if not found:
        raise ValueError(
            f"reward_func: no label given and no 'What is a op b?' question in the prompt {prompt[-80:]!r}; "
            f"pass --label_key"
        )
    a, op, b = found[-1]
    return Problem(int(a), op, int(b)).answer


def reward_func(queries: list[str], prompts: list[str], labels: list[str]) -> list[float]:
    if not (len(queries) == len(prompts) == len(labels)):
        raise ValueError(
            f"reward_func: got {len(queries)} queries, {len(prompts)} prompts, "
            f"{len(labels)} labels; pass one prompt and label per query"
        )
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt) :] if query.startswith(prompt) else query
        rewards.append(score(response, answer_from_prompt(prompt) if label is None else label))
    return rewards
