#!/usr/bin/env bash
# A Prefect worker for the `alignflow` pool, in the checkout (flow runs use its .venv). Refuses to
# start without a reachable PREFECT_API_URL. Extra arguments go to `prefect worker start`.
# Blocks: run it in a terminal of its own (or under a supervisor); Ctrl-C or SIGTERM stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python scripts/prefect_api_check.py worker.sh || exit 2
# `prefect worker start` stops on SIGINT, and answers SIGTERM by sending itself SIGINT. Started where
# SIGINT is ignored (`scripts/worker.sh &` in a script, nohup, some supervisors) it inherits the
# ignore, so SIGTERM did nothing until a SIGKILL. Hence .venv/bin/prefect's own entry point, run
# with Python's SIGINT handler put back first; exec keeps this PID, so a supervisor's SIGTERM reaches it.
exec .venv/bin/python -c 'import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from prefect.cli import app
sys.argv[0] = "prefect"
sys.exit(app())' worker start --pool alignflow "$@"
