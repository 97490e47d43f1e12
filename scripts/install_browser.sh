#!/usr/bin/env bash
# Debian's Chromium for the suite's browser test (tests/test_deployment.py opens the Prefect UI
# with it, driven by Playwright for Python; Playwright's own browser download needs a CDN).
# Idempotent: returns at once when /usr/bin/chromium is there. Needs root and apt-get (CI has
# both); elsewhere it says how to install it and returns 0 (the test then says it is missing).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup] no chromium: the browser test needs it (Debian/Ubuntu: sudo apt-get install -y chromium)" >&2
  exit 0
fi
echo "[setup] installing Debian's chromium for the browser test (a few minutes, once)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
