"""How tests/test_docs.py reads what the docs claim: every doc, recipe comment and flow docstring as text, its
code blocks and prose, the `alignment.cli.X` modules named and the flags given to each, checked against that CLI's
own parser (built from its config class)."""

from __future__ import annotations

import ast
import importlib
import json
import re
from functools import cache
from pathlib import Path

from alignment.config.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    + ([REPO / "CHANGELOG.md"] if (REPO / "CHANGELOG.md").exists() else [])
)
# what else users read as documentation: recipe comments and the flows' docstrings
RECIPES = sorted((REPO / "deployments" / "recipes").glob("*/*.yaml"))
FLOWS = sorted((REPO / "flows").glob("*.py"))

TOP_DIRS = "alignment|alignflow|deployments|scripts|docs|tests|benchmarks|requirements|docker|\\.ci"
# a repository path: starts at a top-level directory, not inside a URI or another path (s3://b/alignflow)
PATH_RE = re.compile(rf"(?<![\w./:-])((?:{TOP_DIRS})/[\w./{{}},+-]*)")
PLACEHOLDER = re.compile(r"[<>*…$]|\.\.\.")
CLI_RE = re.compile(r"alignment\.cli\.(\{[^}]*\}|\w+)")
# dotted flags too (OpenRLHF's --ds.zero_stage); a sentence's full stop after a flag is not part of it, and a
# group written as `--ds.*` is no flag
FLAG_RE = re.compile(r"(?<![\w-])--([a-z][a-z0-9_.]*[a-z0-9])(?![\w.-]*[*<])")
FENCE_RE = re.compile(r"^(```|~~~)")
# "DPO's `--ipo`", "PPO's `normalize_reward`": a flag named as a stage's
OWNED_FLAG_RE = re.compile(r"\b(SFT|RM|PRM|DPO|KTO|KD|PPO)'s `(?:--)?(\w[\w.]*)`")
STAGE_CLI = {
    "SFT": "train_sft",
    "RM": "train_rm",
    "PRM": "train_prm",
    "DPO": "train_dpo",
    "KTO": "train_kto",
    "KD": "train_kd",
    "PPO": "train_ppo_ray",
    "sft": "train_sft",
    "rm": "train_rm",
    "prm": "train_prm",
    "dpo": "train_dpo",
    "kto": "train_kto",
    "kd": "train_kd",
    "ppo": "train_ppo_ray",
    "lora_combiner": "lora_combiner",
    "generate": "batch_inference",
    "score": "batch_inference",
    "tiny_base": "make_tiny_base",
}
PARAM_RE = re.compile(r"--param (sft|rm|ppo|dpo|kto|generate|score|preference)='(\{.*?\})'")
PARAM_CLI = {**STAGE_CLI, "preference": "train_dpo"}  # sft-dpo's preference stage is DPO unless told kto
# bare recipe names ("rm.yaml"); a generic example name is no claim about a shipped file
RECIPE_NAME_RE = re.compile(r"(?<![\w/.{,-])([\w-]+\.yaml)\b")
GENERIC_YAML = {"stage.yaml", "config.yaml"}


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def expand_braces(text: str) -> list[str]:
    """`a/{b,c}.yaml` -> [a/b.yaml, a/c.yaml] (one level, as the docs write it)."""
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    return [
        x for part in m.group(1).split(",") for x in expand_braces(text[: m.start()] + part.strip() + text[m.end() :])
    ]


def doc_texts() -> list[tuple[str, str]]:
    """(name, text) of every doc, recipe comment block and flow docstring. A doc's bad-input corpus table
    (between `<!-- bad inputs -->` and `<!-- /bad inputs -->`) is left out: its flags are wrong on purpose,
    and tests/test_bad_input.py checks it."""
    out = [(rel(p), re.sub(r"<!-- bad inputs -->.*?<!-- /bad inputs -->", "", p.read_text(), flags=re.S)) for p in DOCS]
    for p in RECIPES:
        out.append((rel(p), "\n".join(ln.lstrip("# ") for ln in p.read_text().splitlines() if ln.startswith("#"))))
    for p in FLOWS:
        out.append((rel(p), ast.get_docstring(ast.parse(p.read_text())) or ""))
    return out


def split_blocks(text: str) -> tuple[list[str], list[list[str]]]:
    """(prose lines, code blocks as lists of logical lines: backslash continuations joined)."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        if FENCE_RE.match(line.strip()):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
        elif block is None:
            prose.append(line)
        elif block and block[-1].endswith("\\"):
            block[-1] = block[-1][:-1] + " " + line.strip()
        else:
            block.append(line)
    return prose, blocks


# ---- the CLIs' flags, from their own parsers -------------------------------------------------


def cli_modules() -> set[str]:
    return {p.stem for p in (REPO / "alignment" / "cli").glob("*.py") if p.stem not in ("__init__", "common")}


@cache
def cli_flags(module: str) -> frozenset[str]:
    """Every flag `python -m alignment.cli.<module>` accepts: its config class's parser (the one the
    CLI builds), or, for the few plain-argparse tools, the flags their source adds."""
    source = (REPO / "alignment" / "cli" / f"{module}.py").read_text()
    m = re.search(r"parse_args\((\w+Config)\b", source)
    if m:
        for home in (
            "alignment.config",
            "alignment.config.stages",
            "alignment.config.tools",
            "alignment.config.inference",
            "alignment.config.serving",
            "alignment.config.ppo",
        ):
            cls = getattr(importlib.import_module(home), m.group(1), None)
            if cls is not None:
                parser = build_parser(cls)
                return frozenset(o[2:] for a in parser._actions for o in a.option_strings if o.startswith("--"))
        raise AssertionError(f"alignment/cli/{module}.py parses {m.group(1)}, which alignment.config does not define")
    return frozenset(re.findall(r"add_argument\(\s*['\"]--([\w-]+)['\"]", source)) | {"help"}


def clis_in(text: str) -> list[tuple[int, str]]:
    """(position after the name, module) of every `alignment.cli.X` in `text`, braces expanded."""
    return [(m.end(), name) for m in CLI_RE.finditer(text) for name in expand_braces(m.group(1))]


def flags_after(text: str, start: int) -> list[str]:
    """The flags of the command that starts at `start`: up to the end of that shell command."""
    tail = re.split(r"\s(?:&&|\|\||;|\||#)\s|`", text[start:], maxsplit=1)[0]
    return FLAG_RE.findall(tail)


def flag_problems(name: str, text: str) -> list[str]:
    problems = []
    prose, blocks = split_blocks(text)
    for line in [ln for b in blocks for ln in b]:
        # in a command, a launcher's own flags come before the module (deepspeed --num_gpus 2 --module ...)
        for end, module in clis_in(line):
            if module in cli_modules():
                problems += [
                    f"{name}: `alignment.cli.{module} --{f}`: {module} has no --{f}"
                    for f in flags_after(line, end)
                    if f not in cli_flags(module)
                ]
    for line in prose:
        named = [m for _, m in clis_in(line) if m in cli_modules()]
        if not named:
            continue
        launcher_flags = {
            f
            for span in re.findall(r"`([^`]*)`", line)
            for end, _ in clis_in(span)
            for f in FLAG_RE.findall(span[:end])
        }
        for f in FLAG_RE.findall(line):
            if f not in launcher_flags and not any(f in cli_flags(m) for m in named):
                problems.append(
                    f"{name}: --{f} on a line naming alignment.cli.{'/'.join(named)}, which has no such flag"
                )
    for stage, flag in OWNED_FLAG_RE.findall(text):
        if flag not in cli_flags(STAGE_CLI[stage]):
            problems.append(f"{name}: {stage}'s `{flag}`: alignment.cli.{STAGE_CLI[stage]} has no --{flag}")
    for stage, overrides in PARAM_RE.findall(text):
        try:
            keys = json.loads(overrides)
        except ValueError:
            continue  # a placeholder value such as "<SmolLM2>" unquoted: not a claim about a field
        problems += [
            f"{name}: --param {stage}='{{\"{k}\": ...}}': {PARAM_CLI[stage]} has no --{k}"
            for k in param_keys(keys)
            if k not in cli_flags(PARAM_CLI[stage])
        ]
    return problems


def param_keys(overrides: dict, prefix: str = "") -> list[str]:
    """The flag names an override dict sets: its keys, and OpenRLHF's nested groups as dotted names
    ({"train": {"batch_size": 8}} -> train.batch_size)."""
    return [
        k
        for key, value in overrides.items()
        for k in (param_keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [prefix + key])
    ]


def recipe_flag_problems(path: Path) -> list[str]:
    """A recipe's comments name flags of the stage it configures (dpo.yaml: train_dpo)."""
    module = STAGE_CLI.get(path.stem)
    comments = " ".join(ln for ln in path.read_text().splitlines() if ln.startswith("#"))
    return [
        f"{rel(path)}: comment names --{f}, which alignment.cli.{module} does not accept"
        for f in FLAG_RE.findall(comments)
        if module and f not in cli_flags(module)
    ]
