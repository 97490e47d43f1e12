"""The docs are tested: what README.md and docs/*.md name must exist, so a renamed file, module,
recipe or flag fails here instead of in a reader's terminal.

Checked in every doc (and in the recipes' comments and the flows' docstrings, which users read too):
repository paths in code spans, code blocks and links; `alignment.cli.X` modules; bare recipe file
names; every `--flag` given to an `alignment.cli.X` command (in a code block or on the same line) and
every "DPO's `--flag`" against that CLI's own parser; the keys of `--param sft='{...}'` overrides.
The README's and quickstart's commands must be the project's: make targets in the Makefile, scripts
that exist. The parsers are built from the config classes (tests/doc_checks.py reads the docs and
builds them); one test runs the quickstart's "Your own data" command (two steps on the tiny model) and
tests/test_interrupts.py runs `make demo`'s script with short stages; `make demo-smol`'s flow is
tests/test_sft_dpo_flow.py's.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex

import pytest

from tests.doc_checks import (
    GENERIC_YAML,
    PATH_RE,
    PLACEHOLDER,
    RECIPE_NAME_RE,
    RECIPES,
    REPO,
    cli_flags,
    cli_modules,
    clis_in,
    doc_texts,
    expand_braces,
    flag_problems,
    recipe_flag_problems,
    split_blocks,
)


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
