#!/usr/bin/env bash
# Register alignflow's deployments (deployments/prefect.yaml) with the Prefect server at
# PREFECT_API_URL: checked first, the `alignflow` process work pool created if missing, no prompts.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PREFECT=.venv/bin/prefect
"$PY" scripts/prefect_api_check.py deploy.sh || exit 2
"$PREFECT" work-pool inspect alignflow >/dev/null 2>&1 || "$PREFECT" work-pool create alignflow --type process
ALIGNFLOW_HOME="$PWD" exec "$PREFECT" --no-prompt deploy --all --prefect-file deployments/prefect.yaml
