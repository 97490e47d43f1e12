"""`openrlhf.utils` for reward files: OpenRLHF's math answer helpers (alignment/rewards/math_answers.py)."""

from alignment.rewards.math_answers import extract_boxed_answer, grade_answer

__all__ = ["extract_boxed_answer", "grade_answer"]
