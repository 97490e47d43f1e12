#!/usr/bin/env bash
# The test suite, on the venv. Keeps every tool's state under a private temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline DS_ACCELERATOR=cpu
bash scripts/install_browser.sh
# lint and format first (pyproject.toml [tool.ruff]): a second or two, and the fix is `.venv/bin/ruff format . && .venv/bin/ruff check --fix .`
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
# ALIGNFLOW_TEST_MARKERS: the tests to run (default: all but the demo's 20-minute pipeline, `make test-demo`,
# and the chaos suite of faults injected into flow runs, `make test-chaos`)
exec .venv/bin/python -m pytest -q -ra --durations=50 -m "${ALIGNFLOW_TEST_MARKERS:-not demo and not chaos}" "$@" tests
