"""OpenRLHF's math answer helpers (`openrlhf.utils.extract_boxed_answer`, `grade_answer`), for reward files
written for OpenRLHF. Equivalence is Hugging Face's math-verify (LaTeX and plain expressions to sympy, then
numeric and symbolic comparison), not a parser of our own: `\\frac12`, `1/2` and `0.5` are one answer, so are
`(1,2)` and `(1, 2)`, `10\\%` and `0.1`, `5 cm` and `5`.

extract_boxed_answer is OpenRLHF's rule, kept to the letter: the contents of the last `\\boxed{...}`
(nested braces matched), None when there is none or it is not closed. `\\fbox{...}` is found as OpenRLHF
finds it but, as there, yields None (its remove step strips only `\\boxed{`).
"""

from __future__ import annotations

import threading

from math_verify import parse, verify


def last_boxed(text: str) -> str | None:
    """`\\boxed{...}` (or `\\fbox{...}`) last in `text`, braces matched; None if absent or unclosed."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if text[i] == "}" and depth == 0:
            return text[start : i + 1]
    return None


def extract_boxed_answer(solution: str) -> str | None:
    boxed = last_boxed(solution)
    if boxed is None or not (boxed.startswith("\\boxed{") and boxed.endswith("}")):
        return None
    return boxed[len("\\boxed{") : -1]


def _parsed(answer: str, timeout: int | None) -> list:
    # as LaTeX first ($...$: \frac, \sqrt, \%), then as a plain expression (1/2, 0.5)
    return parse(f"${answer}$", parsing_timeout=timeout) or parse(answer, parsing_timeout=timeout)


def grade_answer(given_answer: str | None, ground_truth: str | None) -> bool:
    """Whether `given_answer` (already taken out of its box) equals `ground_truth`; False for a missing one."""
    if given_answer is None or ground_truth is None:
        return False
    given, truth = str(given_answer).strip(), str(ground_truth).strip()
    if given == truth:
        return True
    # math-verify bounds its sympy work with SIGALRM, which only the main thread may set
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold, pred = _parsed(truth, timeout), _parsed(given, timeout)
    return bool(gold and pred) and verify(gold, pred, timeout_seconds=timeout)
