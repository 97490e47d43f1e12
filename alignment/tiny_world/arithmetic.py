"""The arithmetic task: small-integer questions in chat form with checkable answers.

Deterministic (seeded) and split so that no eval question appears in any training split.
Rows use OpenRLHF-style keys:
  SFT         {"input", "output", "context_messages"}
  preference  {"prompt", "chosen", "rejected", "label"} (rejected = a plausible wrong answer)
  unpaired    {"input", "output", "label": true|false} (KTO's view of the same pairs)
  RL prompts  {"input", "context_messages", "label"}
  eval        {"input", "context_messages", "label"}
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int

    @property
    def answer(self) -> int:
        if self.op == "+":
            return self.a + self.b
        if self.op == "-":
            return self.a - self.b
        return self.a * self.b

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}?"

    def response(self, value: int | None = None) -> str:
        value = self.answer if value is None else value
        return f"{self.a} {self.op} {self.b} = {value}"


@dataclass(frozen=True)
class TaskSpec:
    """How hard the task is. Tuned so SFT of the tiny model lands at 60-85 % held-out accuracy."""

    max_operand: int = 49  # a, b in [0, max_operand] for + and -
    max_factor: int = 9  # a, b in [0, max_factor] for *
    ops: tuple[str, ...] = ("+", "-", "*")


def all_problems(spec: TaskSpec) -> list[Problem]:
    out = []
    for op in spec.ops:
        hi = spec.max_factor if op == "*" else spec.max_operand
        for a in range(hi + 1):
            for b in range(hi + 1):
                if op == "-" and b > a:  # keep answers non-negative: fewer tokens, same skill
                    continue
                out.append(Problem(a, op, b))
    return out


def wrong_answer(p: Problem, rng: random.Random) -> int:
    """A plausible mistake: off by one, off by ten, a dropped carry, or the wrong operator."""
    right = p.answer
    candidates = {right + 1, right - 1, right + 10, right - 10, right + 2}
    if p.op == "+":
        candidates.add(p.a - p.b if p.a >= p.b else p.b - p.a)
    elif p.op == "-":
        candidates.add(p.a + p.b)
    else:
        candidates.add(p.a + p.b)
    choices = sorted(c for c in candidates if c != right and c >= 0)
    return rng.choice(choices)


def near_misses(p: Problem) -> list[int]:
    """Every plausible mistake on `p`, the ones a small model makes most: a units or tens digit
    off by one to three, a digit dropped, doubled or swapped, the wrong operator."""
    right = p.answer
    out = {right + d for d in (1, 2, 3, 9, 10, 11, 20)} | {right - d for d in (1, 2, 3, 9, 10, 11, 20)}
    out |= {p.a + p.b, abs(p.a - p.b), p.a * p.b, right // 10}
    digits = str(right)
    if len(digits) > 1:
        out |= {int(digits[::-1]), int(digits[:-1] + digits[-1] * 2), int(digits[0] + digits)}
    return sorted(c for c in out if c != right and 0 <= c < 1000)


def rm_rows(problems: list[Problem], per_problem: int, rng: random.Random) -> list[dict]:
    """Preference pairs for the reward model: `per_problem` different near misses per question.

    One rejected answer per question (the DPO/KTO pairs) teaches an RM to spot that mistake, not
    to check the sum: on the policy's own (right, wrong) samples such an RM agreed with the rule
    only ~65 % of the time. Several near misses of the same question force it to check."""
    rows = []
    for p in problems:
        misses = near_misses(p)
        for wrong in rng.sample(misses, min(per_problem, len(misses))):
            rows.append(
                {"prompt": p.question, "chosen": p.response(), "rejected": p.response(wrong), "label": str(p.answer)}
            )
    rng.shuffle(rows)
    return rows


def user_turn(p: Problem) -> list[dict]:
    return [{"role": "user", "content": p.question}]


def sft_row(p: Problem) -> dict:
    return {
        "input": p.question,
        "output": p.response(),
        "context_messages": user_turn(p) + [{"role": "assistant", "content": p.response()}],
    }


def preference_row(p: Problem, rng: random.Random) -> dict:
    return {
        "prompt": p.question,
        "chosen": p.response(),
        "rejected": p.response(wrong_answer(p, rng)),
        "label": str(p.answer),
    }


def unpaired_rows(pairs: list[dict], seed: int) -> list[dict]:
    """KTO's view of the preference pairs: each chosen as desirable, each rejected as undesirable."""
    rows = [
        {"input": r["prompt"], "output": r[key], "label": key == "chosen"}
        for r in pairs
        for key in ("chosen", "rejected")
    ]
    random.Random(seed).shuffle(rows)
    return rows


def prompt_row(p: Problem) -> dict:
    return {"input": p.question, "context_messages": user_turn(p), "label": str(p.answer)}


def make_splits(
    spec: TaskSpec = TaskSpec(), seed: int = 0, n_eval: int = 300, n_pref_test: int = 200, n_sft: int = 1000
) -> dict[str, list[dict]]:
    """Disjoint problem sets: eval and preference-test problems are never trained on.

    SFT sees demonstrations for only `n_sft` of the training problems (a minority), while RL
    prompts and preference pairs cover all of them: SFT generalises imperfectly, leaving room
    for the RL stages to improve held-out accuracy. RL prompts list the problems SFT has not
    seen first, so `--max_samples N` gives RL new questions.
    """
    rng = random.Random(seed)
    problems = all_problems(spec)
    rng.shuffle(problems)
    eval_set = problems[:n_eval]
    pref_test = problems[n_eval : n_eval + n_pref_test]
    train = problems[n_eval + n_pref_test :]
    pref_train = [preference_row(p, rng) for p in train]
    pref_test_rows = [preference_row(p, rng) for p in pref_test]
    rm_rng = random.Random(seed + 3)  # its own stream: the other splits stay as they were
    return {
        "sft_train": [sft_row(p) for p in train[:n_sft]],
        "sft_test": [sft_row(p) for p in eval_set[:100]],
        "pref_train": pref_train,
        "pref_test": pref_test_rows,
        "unpaired_train": unpaired_rows(pref_train, seed + 1),
        "unpaired_test": unpaired_rows(pref_test_rows, seed + 2),
        "rm_train": rm_rows(train, 6, rm_rng),
        "rm_test": rm_rows(pref_test, 2, rm_rng),
        "rl_prompts": [prompt_row(p) for p in train[n_sft:] + train[:n_sft]],
        "eval": [prompt_row(p) for p in eval_set],
    }
