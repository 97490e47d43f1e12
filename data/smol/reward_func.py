"""The shipped sums' verifiable reward for SmolLM2 (--remote_rm_url data/smol/reward_func.py): 1.0 when the first
number of the reply is the sum, as `make demo-smol` counts a held-out answer right; 0.0 otherwise. The file form
OpenRLHF's --remote_rm_url accepts: `queries` are prompt + reply, so the reply is what follows its prompt."""

import re

import torch

NUMBER = re.compile(r"-?\d+")
TURN_END = "<|im_end|>"  # SmolLM2-Instruct's ChatML end of turn


def score(reply: str, label: str) -> float:
    found = NUMBER.search(reply.split(TURN_END, 1)[0])
    return float(found is not None and found.group() == str(label).strip())


def reward_func(queries, prompts, labels):
    if not (len(queries) == len(prompts) == len(labels)):
        raise ValueError(f"reward_func: {len(queries)} queries, {len(prompts)} prompts, {len(labels)} labels")
    if any(not q.startswith(p) for q, p in zip(queries, prompts)):
        # the prompt's own numbers would be read as the answer
        raise ValueError("reward_func: a query does not start with its prompt; pass prompt + reply as queries")
    replies = [q[len(p) :] for q, p in zip(queries, prompts)]
    return torch.tensor([score(r, label) for r, label in zip(replies, labels)], dtype=torch.float32)
