"""A wheel built from the repo, installed (non-editable) into a fresh venv, imports every module it
ships: no package left out of pyproject.toml, no module that only works from the checkout; the shipped recipes
and the data they name are found from the installed package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_the_wheel_installs_and_imports_every_module(tmp_path):
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
    modules = sorted(
        n[:-3].replace("/", ".").removesuffix(".__init__")
        for n in zipfile.ZipFile(wheel).namelist()
        if n.endswith(".py")
    )
    # every package directory of the checkout is in the wheel: found by setuptools, not listed
    for init in (REPO / "alignment").rglob("__init__.py"):
        assert ".".join(init.parent.relative_to(REPO).parts) in modules, f"{init.parent} missing from the wheel"
    # flows/, tasks/, data/ at the top of the checkout are alignflow.flows, .tasks, .data (through the links)
    for folder in ("flows", "tasks", "data"):
        assert (REPO / "alignflow" / folder).resolve() == REPO / folder
        for init in (REPO / folder).rglob("__init__.py"):
            assert ".".join(("alignflow", *init.parent.relative_to(REPO).parts)) in modules, f"{init.parent} missing"
    assert not {m.split(".")[0] for m in modules} - {
        "alignment",
        "alignflow",
    }, "a generic top-level module in the wheel"
    assert "alignment.inference.postprocess" in modules and "alignflow.flows.sft_dpo" in modules
    assert "alignflow/data/tiny/sft/train.jsonl" in zipfile.ZipFile(wheel).namelist()
    assert "alignflow/deployments/recipes/tiny/sft.yaml" in zipfile.ZipFile(wheel).namelist()
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
    code = (
        "import importlib, sys\n"
        f"mods = {modules!r}\n"
        "bad = []\n"
        "for m in mods:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception as e:\n        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
        "import alignment, alignflow.flows\n"
        f"assert alignment.__file__.startswith({str(venv)!r}), alignment.__file__\n"
        f"assert alignflow.flows.__file__.startswith({str(venv)!r}), alignflow.flows.__file__\n"
        # the shipped recipes and the data their files name, found in the installed package
        "from alignflow.tasks.recipes import load_recipe\n"
        "from alignflow.tasks.stage_spec import absolute_input\n"
        "tiny = load_recipe('tiny')\n"
        f"assert tiny.has('sft') and str(tiny.folder).startswith({str(venv)!r}), tiny\n"
        f"assert absolute_input('json@data/tiny/sft').startswith('json@' + {str(venv)!r})\n"
        "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run(
        [str(py), "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "DS_ACCELERATOR": "cpu", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
