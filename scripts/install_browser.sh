#!/usr/bin/env bash
# Debian packages the suite needs: Chromium for the browser test (tests/test_deployment.py opens the
# Prefect UI with it, driven by Playwright for Python; Playwright's own browser download needs a CDN)
# and iproute2's `ss` (tests/test_ray_auth.py lists the embedded Ray head's listening sockets with it).
# Idempotent: returns at once when both are there. Needs root and apt-get (CI has both); elsewhere
# it says how to install them and returns 0 (the tests then say what is missing).
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v ss >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup] missing ${missing[*]}: the suite's tests need them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]})" >&2
  exit 0
fi
echo "[setup] installing Debian's ${missing[*]} for the suite's tests (a few minutes, once)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
