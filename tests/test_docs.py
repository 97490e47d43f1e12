"""The docs are tested: what README.md and docs/*.md name must exist, so a renamed file, module,
recipe or flag fails here instead of in a reader's terminal.

Checked in every doc (and in the recipes' comments and the flows' docstrings, which users read too):
repository paths in code spans, code blocks and links; `alignment.cli.X` modules; bare recipe file
names; every `--flag` given to an `alignment.cli.X` command (in a code block or on the same line) and
every "DPO's `--flag`" against that CLI's own parser; the keys of `--param sft='{...}'` overrides.
The README's and quickstart's commands must be the project's: make targets in the Makefile, scripts
that exist. The parsers are built from the config classes; one test runs the quickstart's "Your own
data" command (two steps on the tiny model) and tests/test_interrupts.py runs `make demo`'s script with
short stages; `make demo-smol`'s flow is tests/test_sft_dpo_flow.py's.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

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


# ---- the tests ---------------------------------------------------------------------------------


def test_every_repository_path_module_and_recipe_named_exists():
    recipe_names = {p.name for p in (REPO / "deployments").rglob("*.yaml")}
    problems = []
    for name, text in doc_texts():
        base = (REPO / name).parent
        spans = re.findall(r"`([^`\n]+)`", text) + [ln for b in split_blocks(text)[1] for ln in b]
        for span in spans:
            for raw in PATH_RE.findall(span):
                for path in expand_braces(raw.rstrip(".,;:)")):
                    path = path.split(":")[0].split("#")[0].rstrip("/.,")
                    if not PLACEHOLDER.search(raw) and not (REPO / path).exists():
                        problems.append(f"{name}: `{path}` does not exist")
            for yaml_name in RECIPE_NAME_RE.findall(span):
                if yaml_name not in recipe_names | GENERIC_YAML:
                    problems.append(f"{name}: recipe file `{yaml_name}` is in no folder of deployments/")
        for _, module in clis_in(text):
            if module not in cli_modules():
                problems.append(f"{name}: alignment.cli.{module} does not exist (alignment/cli/{module}.py)")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:|#", target):
                continue  # a URL or an anchor in the same page
            if not (base / target.split("#")[0]).exists():
                problems.append(f"{name}: link target {target} does not exist")
    assert not problems, "\n".join(problems)


def test_every_flag_named_for_a_cli_is_one_it_accepts():
    problems = [p for name, text in doc_texts() for p in flag_problems(name, text)]
    problems += [p for path in RECIPES for p in recipe_flag_problems(path)]
    assert not problems, "\n".join(problems)


# flags of the tools the docs show beside ours (ray, prefect, torchrun, deepspeed, docker, tensorboard, aws),
# and `--flag` as a word for any flag
OTHER_TOOLS_FLAGS = {
    "address",
    "all",
    "block",
    "dashboard-host",
    "gpus",
    "head",
    "logdir",
    "module",
    "no-prompt",
    "node-ip-address",
    "nproc_per_node",
    "num-cpus",
    "num-gpus",
    "num_gpus",
    "param",
    "pool",
    "prefect-file",
    "recursive",
    "rm",
    "shm-size",
    "watch",
    "flag",
    "check",  # ruff format --check
    "fix",  # ruff check --fix
}
ANY_FLAG_RE = re.compile(r"(?<![\w-])--([a-z][\w.-]*[a-z0-9])(?![\w.-]*[*<])")


def test_every_flag_in_the_docs_is_one_something_accepts():
    """Wherever a doc names a flag, some CLI of ours, a script of ours, an OpenRLHF flag we refuse by
    name, or one of the other tools shown accepts it: a renamed flag fails here even in prose."""
    from alignment.config.cli import OPENRLHF_NOT_BUILT

    known = set().union(*(cli_flags(m) for m in cli_modules()), OTHER_TOOLS_FLAGS, (f[2:] for f in OPENRLHF_NOT_BUILT))
    for script in [
        *(REPO / "scripts").rglob("*.py"),
        *(REPO / "benchmarks").rglob("*.py"),
        *(REPO / "alignflow").glob("*.py"),
    ]:
        known |= set(re.findall(r"['\"]--([\w-]+)['\"]", script.read_text()))
    problems = []
    for name, text in doc_texts():
        for span in re.findall(r"`([^`\n]+)`", text) + [ln for b in split_blocks(text)[1] for ln in b]:
            problems += [
                f"{name}: --{f} is a flag of nothing here" for f in ANY_FLAG_RE.findall(span) if f not in known
            ]
    assert not problems, "\n".join(sorted(set(problems)))


# commands that are not the project's own but that a reader runs as written (their flags are theirs)
OTHER_TOOLS = {
    "git",
    "cd",
    "export",
    "rm",
    "time",
    "tensorboard",
    "prefect",
    ".venv/bin/prefect",
    "ray",
    "deepspeed",
    "torchrun",
    "pip",
    "docker",
    "sbatch",
    "wandb",
    "aws",
    "curl",
    "nvidia-smi",
    "apt-get",
    "sudo",
}


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))


def command_problems(name: str, command: str) -> list[str]:
    """Why `command` (one logical shell line) is not one this project has, if it is not."""
    words = shlex.split(command.split(" #")[0], comments=True)
    if not words:
        return []
    words = [w for w in words if not re.match(r"^\w+=", w)] or words  # VAR=value prefixes
    head, args = words[0], words[1:]
    if head == "make":
        return [f"{name}: `make {t}`: no such target in the Makefile" for t in args if t not in make_targets()]
    if head in ("bash", "sh") or head.startswith("scripts/"):
        script = args[0] if head in ("bash", "sh") else head
        return [] if (REPO / script).is_file() else [f"{name}: `{command}`: {script} does not exist"]
    if head in (".venv/bin/python", "python", "python3"):
        if args[:1] == ["-m"]:
            module = args[1]
            ok = importlib.util.find_spec(module.split(".")[0]) is not None and (
                not module.startswith("alignment.cli.") or module.split(".")[-1] in cli_modules()
            )
            return [] if ok else [f"{name}: `{command}`: no module {module}"]
        return [] if not args or (REPO / args[0]).is_file() else [f"{name}: `{command}`: {args[0]} does not exist"]
    if head in OTHER_TOOLS:
        return []
    return [f"{name}: `{command}`: {head} is neither a make target, a script of the repository nor a known tool"]


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart.md"])
def test_the_readme_and_quickstart_commands_are_the_projects(doc):
    text = (REPO / doc).read_text()
    blocks = re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)
    problems = []
    for block in blocks:
        for line in split_blocks(f"```\n{block}```")[1][0]:
            problems += command_problems(doc, line.strip())
    for target in re.findall(r"`make ([\w-]+)", text):
        if target not in make_targets():
            problems.append(f"{doc}: `make {target}`: no such target in the Makefile")
    assert blocks and not problems, "\n".join(problems)


def test_deployment_descriptions_quote_no_figure_the_docs_own():
    """A deployment's description is shown in the UI beside the run; accuracy figures live in
    docs/ppo.md and docs/pipeline.md only, where they are dated and explained (one source)."""
    import yaml

    deployments = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())["deployments"]
    quoting = [d["name"] + ": " + d["description"] for d in deployments if "%" in d.get("description", "")]
    assert not quoting, quoting


@pytest.mark.integration
def test_the_quickstarts_own_data_command_runs(tiny_base, tmp_path):
    """docs/quickstart.md's "Your own data" command as written, its placeholders filled (the tiny model, a
    JSONL with `question`/`answer`) and two optimizer steps appended: it trains and commits."""
    import subprocess
    import sys

    from tests.conftest import python_env

    text = (REPO / "docs" / "quickstart.md").read_text()
    section = text[text.index("## Your own data") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1).replace("\\\n", " ")
    argv = shlex.split(block)
    assert argv[:3] == [".venv/bin/python", "-m", "alignment.cli.train_sft"], argv
    rows = [json.loads(ln) for ln in (REPO / "data/tiny/sft/train.jsonl").read_text().splitlines()[:256]]
    data = tmp_path / "my.jsonl"
    data.write_text("".join(json.dumps({"question": r["input"], "answer": r["output"]}) + "\n" for r in rows))
    filled = {"/path/to/model": str(tiny_base), "my.jsonl": str(data), "runs/my-sft": str(tmp_path / "my-sft")}
    cmd = [sys.executable, *[filled.get(a, a) for a in argv[1:]], "--max_steps", "2"]
    proc = subprocess.run(cmd, env=python_env(OMP_NUM_THREADS="2"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "my-sft" / "MANIFEST.json").exists()
