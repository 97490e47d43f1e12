"""How the suite's tests share this machine under pytest-xdist: each worker's cores, the order files are handed
out in. Hooks imported by tests/conftest.py."""

from __future__ import annotations

import os

import pytest

# Under pytest-xdist (CI runs `-n 2`) each worker gets cores of its own, and every process it starts
# (ranks, Ray, vLLM) inherits them: two workers whose OpenMP threads spin on the same cores slow each
# other far more than 2x. The trainers size their thread pools from this affinity.
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw") and hasattr(os, "sched_setaffinity"):
    _cores = sorted(os.sched_getaffinity(0))
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if 1 < _workers <= len(_cores):
        _per, _k = len(_cores) // _workers, int(os.environ["PYTEST_XDIST_WORKER"][2:])
        os.sched_setaffinity(0, _cores[_k * _per : (_k + 1) * _per])

# The test files that take minutes, heaviest first (their CI tests' time on one of CI's two pinned workers,
# 2026-12-07: the deployment ~900 s, OpenRLHF v0.11's lines ~700 s, the gates and compare flows ~460 s, ...).
# xdist hands out whole files in collection order (scripts/run_tests.sh: --dist loadfile --no-loadscope-reorder),
# so the long ones start first and the two workers finish together, instead of one running a long file alone at
# the end.
SLOW_FILES = (
    "test_chaos_kills.py",  # make test-chaos's longest (not CI's: soak)
    "test_deployment.py",
    "test_openrlhf_v011.py",
    "test_gates_and_compare.py",
    "test_sft_integration.py",
    "test_ppo_ray.py",
    "test_interrupts.py",
    "test_ppo_integration.py",
    "test_chaos.py",
    "test_multinode.py",
    "test_integrity.py",
    "test_ppo_vllm.py",
    "test_agents.py",
    # split out of test_ppo_integration.py and test_integrity.py (4 and 3 CLI runs that train): shorter than those
    "test_ppo_filtering_and_ema.py",
    "test_nonfinite_and_damaged_models.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow files first, the rest in collection order (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))
