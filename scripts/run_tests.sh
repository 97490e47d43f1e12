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
# the chaos suite of faults injected into flow runs, `make test-chaos`, and the second proofs, `make test-extended`)
MARKERS=${ALIGNFLOW_TEST_MARKERS:-not demo and not chaos and not extended}
# Two phases. First the suite on ALIGNFLOW_TEST_WORKERS pytest-xdist workers (default: 2 where there are
# 2 cores or more; each worker pinned to its own cores by tests/scheduling.py, a test file stays on one worker so its
# module fixtures are built once). On 2 cores this takes under 2/3 of one process's time: much of a test is
# single-threaded (process start-up, imports, Ray and Prefect bookkeeping). Then the `alone` tests, which look
# at every process on the machine, one at a time.
cores=$(nproc)
WORKERS=${ALIGNFLOW_TEST_WORKERS:-$(( cores >= 2 ? 2 : 1 ))}
if [ "$WORKERS" -gt 1 ]; then PARALLEL=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder); else PARALLEL=(-p no:xdist); fi
# the models the suite builds once (the SmolLM2 import, the short RM), shared by both phases (tests/conftest.py)
ALIGNFLOW_TEST_BUILT=$(mktemp -d -t alignflow-test-built-XXXXXX)
export ALIGNFLOW_TEST_BUILT
trap 'rm -rf "$ALIGNFLOW_TEST_BUILT"' EXIT
# exit 5 is "no test selected" in that phase (`make test-demo` has no `alone` tests): not a failure
status=0
phase() { "$@" || { rc=$?; [ "$rc" = 5 ] || status=$rc; }; }
phase .venv/bin/python -m pytest -q -ra --durations=50 "${PARALLEL[@]}" -m "($MARKERS) and not alone" "$@" tests
phase .venv/bin/python -m pytest -q -ra --durations=10 -p no:xdist -m "($MARKERS) and alone" "$@" tests
exit $status
