"""benchmarks/trl_compare.py at its smoke size: one workload of each kind runs (ours and TRL 1.16) and
the report gets a row per workload run and a chart. Speed is not asserted: the figures of a smoke run mean
nothing; docs/benchmarks.md holds the full-size run.

One recorded pair, no warm-up, no vLLM side and one workload per kind keep it near 1 minute on 2 cores (the runs are
start-up bound: ~11 s per training subprocess, ~50 s for the vLLM side, ~50 s for Prefect -> Ray);
the vLLM engine itself is tested by tests/test_ppo_ray.py. The profile scripts (op_profile.py,
step_variants.py) run at a few steps of the 25 M model: their output parses, not their figures.
cpu_share.py is not run here: it is one flow run plus the bare CLI at >= 400 steps.

Marked `demo` with the other by-hand checks (`make test-demo`): a benchmark is run by hand, and these ~2.5
minutes are what CI's 60-minute budget could not hold (docs/quickstart.md, "Tests")."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO, python_env

pytestmark = [pytest.mark.integration, pytest.mark.demo]

# One workload of each kind: tokens (SFT), pairs (DPO; the RM is the same RunSpec and runners with another
# kind), RL iterations (GRPO, whose row also says its vLLM side was not run; RLOO is the same RunSpec with
# another estimator). Not the two that go through a flow ("orchestration", "placement"): each
# is one Prefect -> Ray start-up plus a flow run (~60 s here), and the flow path itself is what
# tests/test_ray_ranks.py runs (2 ranks through the flow = torchrun). `--only` of all five ran in 118 s here.
ONLY = "sft,dpo,grpo"
ROWS = ("SFT (packing)", "DPO", "RL iteration: GRPO, ours (HF generate)")


def trl_available() -> bool:
    return importlib.util.find_spec("trl") is not None or (REPO / ".venv-trl" / "bin" / "python").exists()


@pytest.mark.skipif(
    not trl_available(),
    reason="TRL is not installed in this venv (requirements/cpu.txt pins "
    "trl==1.16.0; run `make setup`) nor in .venv-trl",
)
def test_tiny_comparison_writes_every_workload_row_and_a_chart(tmp_path):
    md, png = tmp_path / "bench.md", tmp_path / "bench.png"
    cmd = [
        sys.executable,
        "benchmarks/trl_compare.py",
        "--tiny",
        "--pairs",
        "1",
        "--warmup",
        "0",
        "--no-vllm",
        "--only",
        ONLY,
        "--out-md",
        str(md),
        "--out-png",
        str(png),
        "--work",
        str(tmp_path / "work"),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    text = md.read_text()
    for row in ROWS:
        line = next((x for x in text.splitlines() if x.startswith(f"| {row} |")), None)
        assert line is not None, f"no table row for {row!r} in:\n{text[:3000]}"
        assert "nan" not in line.lower() and line.count("|") == 9, line
    assert "| RL iteration: GRPO, ours (vLLM engine) | s/iteration | not run (--no-vllm) |" in text
    for section in ("**Machine**", "**Versions**", "parameters", "## How it is measured"):
        assert section in text
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_op_profile_reports_throughput_and_the_matmul_share(tmp_path):
    """benchmarks/op_profile.py, our side, a few RM steps: one table row with a rate and a share in (0, 100]."""
    cmd = [
        sys.executable,
        "benchmarks/op_profile.py",
        "--kind",
        "rm",
        "--side",
        "ours",
        "--steps",
        "3",
        "--work",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    row = next(x for x in proc.stdout.splitlines() if x.startswith("| ours |"))
    rate, share = row.split("|")[2:4]
    assert float(rate) > 0 and 0 < float(share.strip(" %")) <= 100, row
    assert "mm " in row, row


def test_step_variants_times_each_variant_and_refuses_an_unknown_one(tmp_path):
    base = [sys.executable, "benchmarks/step_variants.py", "--steps", "4", "--work", str(tmp_path)]
    proc = subprocess.run(
        base + ["--variants", "eager"], cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, median = next(x for x in proc.stdout.splitlines() if x.startswith("| eager |")).split("|")[2:4]
    assert float(first) > 0 and float(median) > 0
    bad = subprocess.run(
        base + ["--variants", "eager,jit"], cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --variants jit: choose from eager,compile,bf16,autocast"
    ]
