"""Process-reward rows from the arithmetic task: two-step sums "a op b op c", each step written as
"x op y = v" and ended by a placeholder, labelled "+" while every step so far is right and "-" from the
first wrong one on (Math-Shepherd's labelling: a step after a mistake cannot reach the right answer).

    {"input": "What is 3 + 4 - 2? 3 + 4 = 7 # 7 - 2 = 5 #", "label": ["+", "+"]}

A third of the rows are right, a third go wrong at step 1, a third at step 2 (seeded, deterministic).
"""

from __future__ import annotations

import random

PLACEHOLDER = "#"  # one token of the tiny tokenizer, in no other tiny-world text
REWARD_TOKENS = ("+", "-")  # the positive one first


def _apply(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y


def prm_rows(n: int, seed: int = 0, max_operand: int = 20, placeholder: str = PLACEHOLDER) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = (rng.randint(0, max_operand) for _ in range(3))
        op1, op2 = rng.choice("+-"), rng.choice("+-")
        wrong_at = i % 3  # 0: no mistake, 1: step 1, 2: step 2
        x = _apply(a, op1, b) + (rng.choice((-2, -1, 1, 2, 10)) if wrong_at == 1 else 0)
        y = _apply(x, op2, c) + (rng.choice((-2, -1, 1, 2, 10)) if wrong_at == 2 else 0)
        text = f"What is {a} {op1} {b} {op2} {c}? {a} {op1} {b} = {x} {placeholder} {x} {op2} {c} = {y} {placeholder}"
        labels = {0: ["+", "+"], 1: ["-", "-"], 2: ["+", "-"]}[wrong_at]
        rows.append({"input": text, "label": labels})
    return rows
