"""A reward that varies from the first iteration, even for a random-init model (tests/test_same_arithmetic.py):
the response's length in characters, modulo 5, over 4."""


def reward_func(queries, prompts, labels, **kwargs):
    return [(len(q) - len(p)) % 5 / 4 for q, p in zip(queries, prompts)]
