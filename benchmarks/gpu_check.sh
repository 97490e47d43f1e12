#!/usr/bin/env bash
# The GPU paths on one NVIDIA GPU (run by hand on a lent H100; CI never runs it), in one go of under 8 minutes:
#  1. every stage CLI on the tiny world under OpenRLHF's launcher (`deepspeed --num_gpus 1 --module ...`):
#     DeepSpeed over NCCL, --bf16, --gradient_checkpointing, ZeRO-2 and ZeRO-3 (+ --adam_offload), the
#     process's peak CUDA memory (final metric mem/cuda_peak_gib), held-out greedy accuracy, the HF weight sync;
#  2. ours vs TRL 1.16 on one GPU in bf16, SFT (tokens/s) and DPO (pairs/s), on a random-init model of
#     SmolLM2-135M's architecture: 3 pairs each, medians (benchmarks/trl_compare.py --device cuda).
#
# Usage: bash benchmarks/gpu_check.sh OUT_DIR
#   python3 with torch (CUDA), transformers, deepspeed, trl, datasets importable (PYTHONPATH may add carried wheels).
#   GPU_CHECK_BUDGET_S (default 440): the whole script's seconds; every step's timeout is cut to what is left.
#   GPU_CHECK_SMOKE=1: a few steps of everything on whatever device is there (a CPU dry run of the plumbing).
# Writes to OUT_DIR (6 files, flat): summary.jsonl (a line per step: status, seconds; a line per trained stage:
# first/last metrics, peak CUDA memory, accuracy), env.log, stages.log (every stage's log, concatenated),
# compare.log, compare.json (written after each workload), compare_runs.log (tails of the compare's runs).
# A failed or timed-out step prints its log tail and the script goes on; the exit status is the count of
# steps that did not end ok.
#
# The tiny model (0.8 M parameters) measures code paths, not the GPU's speed. To fit the budget, the
# stages run two at a time (phase 1: the two SFT runs) and four at a time (phase 2: RM, DPO, PPO and the weight sync
# from the phase-1 SFT model); their loop times are therefore not per-stage speeds. --flash_attn is not passed:
# flash-attn is not on the lent machine and the flag would only log its SDPA fallback.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUDGET_S=${GPU_CHECK_BUDGET_S:-440}
SMOKE=${GPU_CHECK_SMOKE:-0}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1 WANDB_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
# DeepSpeed JIT-builds FusedAdam (and CPUAdam for --adam_offload) on first use: the carried wheel has no
# prebuilt ops. The build lands in ~/.cache/torch_extensions; later processes load it in a second.
export DS_SKIP_CUDA_CHECK=${DS_SKIP_CUDA_CHECK:-1}
PY=${PYTHON:-python3}
W=$(mktemp -d /tmp/gpu_check.XXXXXX)
mkdir -p "$W/logs/collected"
START=$SECONDS
DEADLINE=$((START + BUDGET_S))
SUMMARY=$OUT/summary.jsonl
: >"$SUMMARY"
: >"$OUT/stages.log"

elapsed() { echo "$((SECONDS - START))"; }
record() {  # record NAME STATUS RC SECONDS: one summary line per step
  printf '{"step": "%s", "status": "%s", "rc": %s, "wall_s": %s, "at_s": %s}\n' "$1" "$2" "$3" "$4" "$(elapsed)" >>"$SUMMARY"
}
# run NAME CAP_S CMD...: the command's output to ${LOGDIR:-$W/logs}/NAME.log, at most CAP_S seconds and never past
# the deadline (minus $RESERVE, kept for later phases); timeout ends the command's whole process group.
run() {
  local name=$1 cap=$2
  shift 2
  local log=${LOGDIR:-$W/logs}/$name.log left=$((DEADLINE - SECONDS - ${RESERVE:-0}))
  if ((left < 20)); then
    echo "[$(elapsed) s] $name: SKIPPED (${left} s left of the budget)"
    record "$name" skipped null 0
    return 1
  fi
  local t=$((cap < left ? cap : left)) t0=$SECONDS rc
  echo "[$(elapsed) s] $name: start (timeout $t s)"
  { echo "\$ $*"; echo; } >"$log"
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
  rc=$?
  local status=ok
  ((rc == 0)) || status=failed
  ((rc == 124 || rc == 137)) && status=timeout
  record "$name" "$status" "$rc" "$((SECONDS - t0))"
  echo "[$(elapsed) s] $name: $status (rc $rc) after $((SECONDS - t0)) s"
  if ((rc != 0)); then
    echo "----- $name: last 40 lines of its log -----"
    tr '\r' '\n' <"$log" | grep -v '^\s*$' | tail -n 40 | cut -c1-400   # progress bars end lines with \r
    echo "----- end of $name -----"
    return 1
  fi
}
collect() {  # append the finished steps' logs to OUT/stages.log (after each phase: a cut-off run keeps them)
  for f in "$W"/logs/*.log; do
    [ -f "$f" ] || continue
    { echo "===== $(basename "$f" .log)"; cat "$f"; echo; } >>"$OUT/stages.log"
    mv "$f" "$W/logs/collected/"
  done
}
flags() { "$PY" -c "from alignment.tiny_world import recipes; print(' '.join(recipes.$1))"; }
summary() {  # summary NAME SAVE_DIR EVALUATE: the stage's first/last metrics + peak CUDA memory (+ accuracy)
  timeout -k 5 90 "$PY" - "$1" "$2" "$3" >>"$SUMMARY" 2>>"$W/logs/$1.log" <<'PY'
import json, sys
from pathlib import Path
name, save, evaluate = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1"
rows = [json.loads(l) for l in (save / "metrics.jsonl").read_text().splitlines() if l.strip()]
train = [r for r in rows if any(k.startswith("train/") for k in r)] or rows
final = json.loads((save / "MANIFEST.json").read_text())["metadata"]["final_metrics"]
cfg = json.loads((save / "config.json").read_text())
out = {"stage": name, "dtype_saved": cfg.get("dtype") or cfg.get("torch_dtype"), "steps": rows[-1].get("step"),
       "first": {k: v for k, v in train[0].items() if k.startswith("train/")},
       "last": {k: v for k, v in final.items() if k.startswith(("train/", "eval/"))},
       "cuda_peak_gib": final.get("mem/cuda_peak_gib"), "loop_s": final.get("time/loop_s")}
if evaluate:
    from alignment.tiny_world.evaluate import greedy_accuracy
    out["heldout_greedy_accuracy"] = greedy_accuracy(save).accuracy
print(json.dumps(out))
PY
}
# stage NAME PORT EVALUATE MODULE ARGS...: `deepspeed --num_gpus 1 --module MODULE ARGS` (OpenRLHF's launch line),
# then its summary line
stage() {
  local name=$1 port=$2 evaluate=$3 module=$4 save=$W/$1
  shift 4
  # its own tokenized-data cache: stages that run at once never write the same cache file
  ALIGNFLOW_TOKENIZED_CACHE=$W/tokenized_$name run "$name" "$CAP" \
    "$PY" -m deepspeed.launcher.runner --num_gpus 1 --master_port "$port" --module "$module" \
    --save_path "$save" --ckpt_path "$W/ckpt_$name" "$@" "${GPU[@]}" &&
    { summary "$name" "$save" "$evaluate" || echo "$name: summary failed"; }
}

# ---- environment: what the run used (also whether the carried wheels shadow the machine's packages)
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
  command -v nvcc && nvcc --version | tail -n 2
  timeout -k 5 120 "$PY" - <<'PY'
import importlib, importlib.metadata as md, importlib.util, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "transformers", "tokenizers", "accelerate", "peft", "deepspeed", "trl", "datasets", "pydantic",
             "pydantic_core", "typing_extensions", "dill", "multiprocess", "hjson", "huggingface_hub", "numpy",
             "pyarrow", "pandas", "fsspec", "safetensors", "xxhash", "ninja", "einops", "msgpack", "psutil"):
    try:
        mod = importlib.import_module(name)
        version = getattr(mod, "__version__", None) or md.version(name.replace("_", "-"))
        print(f"{name:18} {version}  {getattr(mod, '__file__', '')}")
    except Exception as e:
        print(f"{name:18} NOT IMPORTABLE: {type(e).__name__}: {e}")
import torch
if torch.cuda.is_available():
    print("cuda", torch.version.cuda, torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())
for name in ("ray", "prefect", "wandb", "s3fs", "vllm", "flash_attn"):
    print(f"{name:18} {'present' if importlib.util.find_spec(name) else 'absent'}")
PY
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

# Step counts: the recipes' (alignment/tiny_world/recipes.py) cut to fit the budget; docs/gpu.md has a run of the
# full recipes (SFT 1,200 steps, DPO 2 epochs) on an H100: about 7.5 minutes for the stages alone.
GPU=(--bf16 --gradient_checkpointing)
SFT2=(--zero_stage 2 --max_steps 600 --eval_steps 300)
SFT3=(--zero_stage 3 --adam_offload --max_steps 100 --eval_steps 100)
RM=(--zero_stage 3 --max_steps 200 --max_samples 3200 --eval_steps 200)
DPO=(--zero_stage 3 --max_epochs 1 --eval_steps 105)
PPO=(--zero_stage 3 --num_episodes 1 --max_samples 320 --init_kl_coef 0.01)
COMPARE=(--device cuda --bf16 --model smollm2-135m --pairs 3 --warmup 0 --threads 8)
CAP1=170 CAP2=130
if [ "$SMOKE" = 1 ]; then   # the plumbing only: a few steps, the tiny compare on the CPU
  SFT2=(--zero_stage 2 --max_steps 3 --eval_steps 3)
  SFT3=(--zero_stage 3 --adam_offload --max_steps 3 --eval_steps 3)
  RM=(--zero_stage 3 --max_steps 3 --max_samples 64 --eval_steps 3)
  DPO=(--zero_stage 3 --max_steps 3 --eval_steps 3)
  PPO=(--zero_stage 3 --num_episodes 1 --max_samples 16 --init_kl_coef 0.01)
  COMPARE=(--tiny --bf16 --pairs 1 --warmup 0 --no-vllm --out-md "$W/compare.md" --out-png "$W/compare.png")
  CAP1=400 CAP2=400
fi
export OMP_NUM_THREADS=4   # stages run concurrently on 16 cores

run base 60 "$PY" -c "from alignment.tiny_world.base_model import make_base; make_base('$W/base', seed=0)"

# ---- phase 1: SFT ZeRO-2 (the recipe's 600 of 1,200 steps) | SFT ZeRO-3 + optimizer offload (100 steps)
RESERVE=240 CAP=$CAP1   # what phases 2 and 3 need
stage sft_zero2_bf16 29501 1 alignment.cli.train_sft --pretrain "$W/base" $(flags "sft_flags()") "${SFT2[@]}" &
stage sft_zero3_offload_bf16 29502 0 alignment.cli.train_sft --pretrain "$W/base" $(flags "sft_flags()") "${SFT3[@]}" &
wait
collect
SFT=$W/sft_zero2_bf16
[ -f "$SFT/MANIFEST.json" ] || { echo "no SFT model: phase 2 starts from the random base"; SFT=$W/base; }

# ---- phase 2: RM | DPO | PPO | weight sync, all from the SFT model
RESERVE=190 CAP=$CAP2   # what the comparison needs
stage rm_zero3_bf16 29503 0 alignment.cli.train_rm --pretrain "$SFT" $(flags "rm_flags()") "${RM[@]}" &
stage dpo_zero3_bf16 29504 1 alignment.cli.train_dpo --pretrain "$SFT" $(flags "dpo_flags()") "${DPO[@]}" &
stage ppo_group_norm_zero3_bf16 29505 1 alignment.cli.train_ppo --pretrain "$SFT" $(flags "ppo_flags('group_norm')") \
  "${PPO[@]}" &
{ OMP_NUM_THREADS=6 run weight_sync_hf 120 "$PY" -m alignment.cli.check_weight_sync --pretrain "$SFT" --engine hf &&
    { grep '^{' "$W/logs/weight_sync_hf.log" | tail -n 1 | "$PY" -c \
      "import json,sys; print(json.dumps({'stage': 'weight_sync_hf', **json.loads(sys.stdin.read())}))" >>"$SUMMARY" ||
      echo "weight_sync_hf: no JSON line"; }; } &
wait
collect

# ---- phase 3 (alone on the GPU): ours vs TRL 1.16, SFT then DPO, bf16, SmolLM2-135M architecture
RESERVE=10
LOGDIR=$OUT run compare 300 "$PY" benchmarks/trl_compare.py --only sft,dpo "${COMPARE[@]}" \
  --work "$W/compare" --out-json "$OUT/compare.json"
for f in "$W"/compare/logs/*.log; do
  [ -f "$f" ] && { echo "===== $(basename "$f" .log) (last 60 lines)"; tr '\r' '\n' <"$f" | tail -n 60; echo; }
done >"$OUT/compare_runs.log"
grep '^\[bench\]' "$OUT/compare.log" | grep -v ' round ' || true

FAILED=$(grep -c '"status": "\(failed\|timeout\|skipped\)"' "$SUMMARY")
echo "[$(elapsed) s] done, $FAILED step(s) not ok; summary:"
cat "$SUMMARY"
rm -rf "$W"
exit "$FAILED"
