"""The import graph is what docs/architecture.md says it is: the packages of `alignment` in layers, each
importing only from layers below it (or from inside itself), no cycle between modules, the Prefect side
(alignflow) above all of it, and imports at the top of a module except in the few places that must stay
light. Read from the source (ast), so a function-level import counts as much as a top-level one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

from tests.conftest import REPO

# bottom first; a unit is a package directly under alignment/ or a top-level module of it
LAYERS = [
    {"errors", "redact", "events", "fingerprint", "logs", "losses", "openrlhf_names"},  # none but errors'
    {"nonfinite", "storage"},
    {"lease", "config"},
    {"distributed", "datasets", "outputs"},
    {"models", "tiny_world"},
    {"rollout", "rewards", "training", "lineage"},
    {"trainers", "agents", "inference"},
    {"ppo", "openrlhf_shim"},
    {"cli"},
]
# Imports are at the top of a module, except at the one start-up boundary: a CLI's `main`, once its flags
# are checked (a bad flag exits 2 in 0.3 s, before torch, transformers or DeepSpeed load: 2.9 s and 260 MB,
# measured for train_sft). Also deferred: optional dependencies (ImportError says which extra to install),
# a version's alternative under `try/except ImportError`, and the one call from the Prefect side into data
# loading (the flow process stays free of `datasets`).
BOUNDARY = "alignment/cli/"
OPTIONAL = (
    "vllm",
    "wandb",
    "torch.utils.tensorboard",
    "peft",
    "liger_kernel",
    "modelscope",
    "matplotlib",
    "readline",
    "bitsandbytes",
    "flash_attn",
    "ring_flash_attn",
    "PIL",
    # only for --optim muon, imported as DeepSpeed's engine does: the module sets up compiled kernels
    "deepspeed.runtime.zero.muon",
)
FLOW_PROCESS = {"alignflow/tasks/orchestration/stage_spec.py": "alignment.datasets.sources"}


def modules(root: str, name: str | None = None) -> dict[str, Path]:
    """module name -> file, for the .py files under REPO/root (imported as `name`, default root)."""
    return {
        ".".join((name or root, *p.relative_to(REPO / root).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in sorted((REPO / root).rglob("*.py"))
    }


ALIGNMENT = modules("alignment")


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir: the shipped data and deployments, top-level folders that are package data."""
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


# alignflow/ (its flows and tasks are real folders in it), and data/ and deployments/ under their package names
ALIGNFLOW = {
    **modules("alignflow"),
    **{m: p for name, d in package_dirs().items() for m, p in modules(d, name).items()},
}
# the Prefect side, bottom first: a module imports from its own unit or a lower layer (and alignment's torch-free
# layers); each flow file is a unit of its own, so no flow imports another (Prefect loads each as an entrypoint)
PREFECT_LAYERS = [
    {"alignflow.tasks.cluster", "alignflow.tasks.presentation"},  # the Ray cluster; reports, curves, artifacts
    {"alignflow.tasks.orchestration"},  # plan, validate, run stages, retry, skip what is committed
    {"alignflow.flows", "alignflow.policy"},  # the flows; the policy pointer's command line
]


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported module, line, at top level) for every import of alignment/alignflow in the file."""
    tree = ast.parse(path.read_text())
    top = {
        id(s) for n in tree.body for s in ast.walk(n) if isinstance(n, (ast.Import, ast.ImportFrom, ast.Try, ast.If))
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        else:
            continue
        for name in names:
            if name.split(".")[0] in ("alignment", "alignflow"):
                while name not in known and "." in name:
                    name = name.rsplit(".", 1)[0]
                found.append((name, node.lineno, id(node) in top))
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer(u: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if u in names)


def test_every_unit_has_a_layer():
    units = {unit(m) for m in ALIGNMENT if m != "alignment"}
    assert units == set().union(*LAYERS), "add the new package to LAYERS (and docs/architecture.md)"


@pytest.mark.parametrize("module", sorted(ALIGNMENT))
def test_alignment_imports_only_downwards(module):
    if module == "alignment":
        return
    me = unit(module)
    wrong = [
        f"{name} (line {line})"
        for name, line, _ in imports(ALIGNMENT[module], ALIGNMENT)
        if name.startswith("alignflow") or (name != "alignment" and unit(name) != me and layer(unit(name)) >= layer(me))
    ]
    assert not wrong, f"{module} (layer {layer(me)}) imports from its layer or above: {wrong}"


def test_no_import_cycle_between_modules():
    """Tarjan's strongly connected components over module -> imported module (the implicit import of a
    package's __init__ by its submodules is not an edge: Python runs it first, whatever the code says)."""
    graph = {
        m: {n for n, _, _ in imports(p, ALIGNMENT) if n in ALIGNMENT and n != m and not m.startswith(n + ".")}
        for m, p in ALIGNMENT.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                cycles.append(sorted([v, *comp]))

    for m in graph:
        if m not in index:
            visit(m)
    assert not cycles, cycles


def deferred_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every import inside a function, except those under `try: ... except ImportError`."""
    tree = ast.parse(path.read_text())
    tried = {
        id(s)
        for n in ast.walk(tree)
        if isinstance(n, ast.Try) and any("ImportError" in ast.unparse(h.type or ast.Name("")) for h in n.handlers)
        for s in ast.walk(n)
    }
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in tried:
                    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    found.append((module or "", node.lineno))
    return sorted(set(found), key=lambda x: x[1])


def test_imports_are_at_the_top_except_at_the_start_up_boundary():
    files = [*ALIGNMENT.values(), *ALIGNFLOW.values()]
    hidden = [
        f"{rel}:{line} imports {module}"
        for p in files
        if not (rel := str(p.relative_to(REPO))).startswith(BOUNDARY)
        for module, line in deferred_imports(p)
        if not module.startswith(OPTIONAL) and FLOW_PROCESS.get(rel) != module
    ]
    assert not hidden, "\n".join(hidden)


def prefect_unit(module: str) -> str:
    """A flow file is its own unit; a task module's unit is its subpackage (alignflow.tasks.cluster, ...)."""
    if module.startswith("alignflow.flows."):
        return module
    return next(u for layer_ in PREFECT_LAYERS for u in layer_ if module == u or module.startswith(u + "."))


def prefect_layer(module: str) -> int:
    u = "alignflow.flows" if module.startswith("alignflow.flows.") else prefect_unit(module)
    return next(i for i, units in enumerate(PREFECT_LAYERS) if u in units)


def test_every_module_is_in_the_folder_its_name_says():
    """No symbolic link in the code or the shipped data, no folder renamed for its code: an import, a walk of the
    files (pkgutil, an import-graph tool) and an editor reach the same file under one name. Only data/ and
    deployments/ are mapped (pyproject.toml's package-dir), and they hold data, found with importlib.resources."""
    import importlib
    import importlib.util
    import pkgutil

    roots = ("alignment", "alignflow", *package_dirs().values())
    links = [str(p.relative_to(REPO)) for root in roots for p in (REPO / root).rglob("*") if p.is_symlink()]
    assert not links, links
    assert set(package_dirs()) == {"alignflow.data", "alignflow.deployments"}, "only data is mapped"
    for name, folder in package_dirs().items():
        assert Path(importlib.util.find_spec(name).origin).parent == REPO / folder, name
    walked = {m.name for m in pkgutil.walk_packages(importlib.import_module("alignflow").__path__, "alignflow.")}
    code = {m for m in ALIGNFLOW if not m.startswith(tuple(package_dirs())) and m != "alignflow"}
    assert code <= walked, code - walked
    assert "alignflow.tasks.orchestration.stage" in code and "alignflow.flows.sft_rm_ppo" in code


@pytest.mark.parametrize("module", sorted(m for m in ALIGNFLOW if m.startswith(("alignflow.flows.", "alignflow.tasks.",
                                                                                   "alignflow.policy"))))  # fmt: skip
def test_the_prefect_side_imports_only_downwards(module):
    """flows -> tasks.orchestration -> tasks.cluster, tasks.presentation -> alignment (never the other way: above)."""
    if module.count(".") == 2 and module.startswith("alignflow.tasks."):  # a subpackage's __init__
        return
    me, mine = prefect_unit(module), prefect_layer(module)
    wrong = [
        f"{name} (line {line})"
        for name, line, _ in imports(ALIGNFLOW[module], {**ALIGNMENT, **ALIGNFLOW})
        if name.startswith("alignflow.") and prefect_unit(name) != me and prefect_layer(name) >= mine
    ]
    assert not wrong, f"{module} imports from its layer or above: {wrong}"
