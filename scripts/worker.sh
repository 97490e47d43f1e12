#!/usr/bin/env bash
# A Prefect worker for the `alignflow` pool, in the checkout (flow runs use its .venv). Refuses to
# start without a reachable PREFECT_API_URL. Extra arguments go to `prefect worker start`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python scripts/prefect_api_check.py worker.sh || exit 2
exec .venv/bin/prefect worker start --pool alignflow "$@"
