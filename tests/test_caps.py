"""The size caps of the project's style (docs/architecture.md, "The library's layers"): a file of at most
300 lines, a function of the library, the flows, the benchmarks and the scripts at most 60. A test function may be
longer: an integration test is one scenario's steps and assertions, read top to bottom."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = ("alignment", "alignflow", "benchmarks", "scripts")
FILE_CAP, FUNCTION_CAP = 300, 60


def _python_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (REPO / top).rglob("*.py"))


def test_no_file_over_300_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p in _python_files(*CODE, "tests")
        if (n := len(p.read_text().splitlines())) > FILE_CAP
    }
    assert long == {}, f"split these by idea: {long}"


def test_no_function_over_60_lines():
    long = {}
    for p in _python_files(*CODE):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_CAP:
                    long[f"{p.relative_to(REPO)}:{node.lineno} {node.name}"] = lines
    assert long == {}, f"split these into named steps: {long}"
