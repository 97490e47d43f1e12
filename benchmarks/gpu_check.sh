#!/usr/bin/env bash
# The GPU paths on one NVIDIA GPU (run on a lent H100; CI never runs it): DeepSpeed over NCCL,
# bf16, ZeRO-2/3 (+ optimizer offload), CUDA peak memory, for each stage CLI on the tiny world.
# Usage: bash benchmarks/gpu_check.sh OUT_DIR   (a venv with the GPU stack, or PYTHONPATH set)
# Each stage writes metrics.jsonl; the summary (one JSON line a stage) goes to OUT_DIR/summary.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}:$PWD
PY=${PYTHON:-python3}
W=$(mktemp -d)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'| transformers', transformers.__version__, '| deepspeed', deepspeed.__version__, '| nccl', torch.cuda.nccl.version())"
flags() { "$PY" -c "from alignment.tiny_world import recipes; print(' '.join(recipes.$1))"; }
ds() {  # deepspeed --num_gpus 1 --module MODULE ARGS... (OpenRLHF's launch line), timed
  local name=$1; shift
  local t0=$SECONDS
  "$PY" -m deepspeed.launcher.runner --num_gpus 1 --master_port $((29500 + RANDOM % 1000)) --module "$@" \
    >"$OUT/$name.log" 2>&1 || { tail -n 60 "$OUT/$name.log"; exit 1; }
  echo "$name: $((SECONDS - t0)) s"
}
summary() {  # the stage's last metrics + the eval accuracy of its model, one JSON line
  "$PY" - "$1" "$2" "$3" <<'PY' | tee -a "$OUT/summary.jsonl"
import json, sys
from pathlib import Path
name, save, evaluate = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1"
rows = [json.loads(l) for l in (save / "metrics.jsonl").read_text().splitlines()]
manifest = json.loads((save / "MANIFEST.json").read_text())
final = manifest["metadata"]["final_metrics"]
cfg = json.loads((save / "config.json").read_text())
out = {"stage": name, "dtype_saved": cfg.get("dtype") or cfg.get("torch_dtype"), "steps": rows[-1].get("step"),
       "first": {k: v for k, v in rows[0].items() if k.startswith("train/")},
       "last": {k: v for k, v in rows[-1].items() if k.startswith(("train/", "eval/"))},
       "cuda_peak_gib": final.get("mem/cuda_peak_gib"), "loop_s": final.get("time/loop_s")}
if evaluate:
    from alignment.tiny_world.evaluate import greedy_accuracy
    out["heldout_greedy_accuracy"] = greedy_accuracy(save).accuracy
print(json.dumps(out))
PY
}
"$PY" -c "from alignment.tiny_world.base_model import make_base; make_base('$W/base', seed=0)"
GPU="--bf16 --flash_attn --gradient_checkpointing"
ds sft_z2 alignment.cli.train_sft --pretrain "$W/base" --save_path "$W/sft" $(flags "sft_flags()") $GPU
summary sft_zero2_bf16 "$W/sft" 1
ds sft_z3 alignment.cli.train_sft --pretrain "$W/base" --save_path "$W/sft_z3" $(flags "sft_flags()") $GPU \
  --zero_stage 3 --adam_offload --max_steps 200
summary sft_zero3_offload_bf16 "$W/sft_z3" 0
ds rm_z3 alignment.cli.train_rm --pretrain "$W/sft" --save_path "$W/rm" $(flags "rm_flags()") $GPU --zero_stage 3 --max_steps 300
summary rm_zero3_bf16 "$W/rm" 0
ds dpo_z3 alignment.cli.train_dpo --pretrain "$W/sft" --save_path "$W/dpo" $(flags "dpo_flags()") $GPU --zero_stage 3
summary dpo_zero3_bf16 "$W/dpo" 1
ds ppo_z3 alignment.cli.train_ppo --pretrain "$W/sft" --save_path "$W/ppo" $(flags "ppo_flags('group_norm')") $GPU \
  --zero_stage 3 --num_episodes 1 --max_samples 320 --init_kl_coef 0.01
summary ppo_group_norm_zero3_bf16 "$W/ppo" 1
"$PY" -m alignment.cli.check_weight_sync --pretrain "$W/sft" --engine hf | tee -a "$OUT/summary.jsonl"
rm -rf "$W"
