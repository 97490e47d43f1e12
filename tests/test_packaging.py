"""A wheel built from the repo, installed (non-editable) into a fresh venv outside the checkout, imports every
module it ships (no package left out of pyproject.toml, no module that only works from the checkout), finds the
shipped recipes and the data they name with importlib.resources, plans a shipped recipe's flow and runs its first
two stages (the tiny world's base, two SFT steps) from the installed package alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_layers import package_dirs

pytestmark = pytest.mark.integration

# run by the venv's python, from a directory outside the checkout
IN_THE_VENV = """
import importlib, json, subprocess, sys
venv, modules, store = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
bad = []
for m in modules:
    try:
        importlib.import_module(m)
    except Exception as e:
        bad.append(f"{m}: {type(e).__name__}: {e}")
assert not bad, bad
import alignment, alignflow.flows
assert alignment.__file__.startswith(venv) and alignflow.flows.__file__.startswith(venv)
from alignflow.flows.sft_rm_ppo import sft_rm_ppo_steps
from alignflow.tasks.orchestration.pipeline import plan
from alignflow.tasks.orchestration.recipes import load_recipe
from alignflow.tasks.orchestration.stage_spec import STAGES, absolute_input, job_config
from alignment.config.cli import config_to_argv
tiny = load_recipe("tiny")  # the shipped recipes and the data their files name, in the installed package
assert tiny.has("sft") and str(tiny.folder).startswith(venv), tiny
assert absolute_input("json@data/tiny/sft").startswith("json@" + venv)
planned = plan(sft_rm_ppo_steps(tiny, {"max_steps": 2}, {"max_steps": 2}, {}), tiny, store, "wheel")
assert list(planned) == ["tiny_base", "sft", "rm", "ppo"], list(planned)
for name in ("tiny_base", "sft"):  # each stage's CLI with the config the flow would give its Ray job
    p = planned[name]
    argv = config_to_argv(job_config(p.step.stage, p.cfg, p.out, "wheel"))
    subprocess.run([sys.executable, "-m", STAGES[p.step.stage].module, *argv], check=True)
print(json.dumps({name: planned[name].model_uri for name in ("tiny_base", "sft")}))
"""


def test_the_wheel_installs_and_runs_a_shipped_recipe_outside_the_checkout(tmp_path):
    # setuptools builds in the checkout's build/ (gitignored) and reuses what an earlier build left there: a file
    # gone from the tree would still be in the wheel
    shutil.rmtree(REPO / "build", ignore_errors=True)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("alignflow-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py"))
    # every package folder of the checkout is in the wheel (data/ and deployments/ as alignflow.data, .deployments)
    folders = {"alignment": "alignment", "alignflow": "alignflow", **package_dirs()}
    for name, folder in folders.items():
        for init in (REPO / folder).rglob("__init__.py"):
            package = ".".join((name, *init.parent.relative_to(REPO / folder).parts))
            assert package in modules, f"{init.parent} missing from the wheel: list {package} in pyproject.toml"
    assert not {m.split(".")[0] for m in modules} - {"alignment", "alignflow"}, "a generic top-level module"
    assert "alignment.inference.postprocess" in modules and "alignflow.tasks.cluster.ray_job" in modules
    assert "alignflow/data/tiny/sft/train.jsonl" in names and "alignflow/deployments/recipes/tiny/sft.yaml" in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the dependencies come from the test venv's site-packages (a plain path: its editable finder stays off)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], check=True, timeout=300, capture_output=True
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    store = tmp_path / "store"
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "DS_ACCELERATOR": "cpu", "HOME": str(tmp_path)}
    # DeepSpeed's CPU ops, built once per machine, are not rebuilt for the fresh HOME
    env["TORCH_EXTENSIONS_DIR"] = os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache/torch_extensions"))
    done = subprocess.run(
        [str(py), "-c", IN_THE_VENV, str(venv), json.dumps(modules), str(store)],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    models = json.loads(done.stdout.strip().splitlines()[-1])
    for uri in models.values():  # committed into the store, as the flow's stage tasks would have
        assert (Path(uri) / "MANIFEST.json").is_file() and (Path(uri) / "model.safetensors").is_file(), uri
    assert models["tiny_base"] in (Path(models["sft"]) / "README.md").read_text()  # SFT started from the base
