"""The container recipes and the Slurm launcher, checked without Docker or Slurm (neither runs
here): hadolint passes on both Dockerfiles, shellcheck on the sbatch script, and the files they
name exist, so they can't silently rot. Image builds are not tested (docs/cluster.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent
DOCKERFILES = [REPO / "docker" / "Dockerfile.cpu", REPO / "docker" / "Dockerfile.gpu"]
SBATCH = REPO / "scripts" / "slurm" / "alignflow.sbatch"


def lint(tool: str, *args: str) -> subprocess.CompletedProcess:
    exe = BIN / tool
    assert exe.exists(), f"{exe} missing: `make setup` installs it (requirements/cpu.txt)"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lints_clean_and_names_real_files(dockerfile):
    proc = lint("hadolint", str(dockerfile))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = dockerfile.read_text()
    named = set(re.findall(r"\b(scripts/[\w./-]+\.(?:sh|py)|requirements/[\w.-]+\.txt)", text))
    assert "scripts/setup_venv.sh" in named and all((REPO / p).exists() for p in named), named
    assert re.search(r"^USER \d+$", text, re.M), "the image must not run as root"


def test_setup_script_accepts_the_flavour_the_images_select():
    text = (REPO / "scripts" / "setup_venv.sh").read_text()
    assert 'FLAVOUR=$ALIGNFLOW_FLAVOUR' in text
    assert {"ALIGNFLOW_FLAVOUR=cpu", "ALIGNFLOW_FLAVOUR=gpu"} == {
        m for f in DOCKERFILES for m in re.findall(r"ALIGNFLOW_FLAVOUR=\w+", f.read_text())
    }


def test_dockerignore_keeps_local_state_out_of_the_image():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "runs"} <= set(ignored)


def test_sbatch_script_passes_shellcheck():
    assert subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True).returncode == 0
    proc = lint("shellcheck", str(SBATCH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = SBATCH.read_text()
    assert (
        "ray start --head" in text.replace('"$RAY" ', "ray ") and "--address=" in text and "trap stop_ray EXIT" in text
    )
