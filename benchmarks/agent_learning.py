"""Multi-turn agent RL vs single-turn RL on the tiny world, same SFT start, same budget, several seeds.

Single-turn: GRPO-style group_norm on the rule reward (the settings of deployments/recipes/tiny/grpo.yaml, without
its dynamic sampling and second pass unless asked: --variants ...+filtering, --episodes 2). Multi-turn: the same
stage with --agent_func_path data/tiny/agent_retry.py (a wrong answer gets a hint and another try, up to
three). Each trained model (and the SFT start) is measured on the held-out questions, greedily: first-turn
accuracy, and final accuracy when the same environment answers (up to three tries). Runs resume: a finished
(variant, seed) is read from OUT_DIR.

A third variant, multi-turn+filtering, adds DAPO's dynamic sampling (--dynamic_filtering 0 1) to the multi-turn
run: episodes whose group is all right or all wrong are replaced by more prompts' episodes.

Usage: .venv/bin/python benchmarks/agent_learning.py SFT_DIR OUT_DIR [--seeds 42 43 44] [--iterations 40]
       [--variants single-turn multi-turn multi-turn+filtering] [--episodes 2]
Writes OUT_DIR/agent_learning.json and prints a markdown table (docs/agents.md keeps the dated one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

ENV = REPO / "data" / "tiny" / "agent_retry.py"
RULE = REPO / "data" / "tiny" / "reward_func.py"
PROMPTS_PER_ITERATION = 16
VARIANTS = ("single-turn", "multi-turn", "multi-turn+filtering")


def rl_flags(sft: str, out: Path, seed: int, iterations: int, variant: str, episodes: int = 1) -> list[str]:
    reward = ["--agent_func_path", str(ENV)] if variant.startswith("multi-turn") else ["--remote_rm_url", str(RULE)]
    if variant.endswith("+filtering"):  # DAPO's dynamic sampling: all-right / all-wrong groups replaced
        reward += ["--dynamic_filtering", "--dynamic_filtering_reward_range", "0", "1"]
    return [
        "--pretrain",
        sft,
        "--save_path",
        str(out),
        "--prompt_data",
        f"json@{REPO}/data/tiny/prompts",
        "--input_key",
        "context_messages",
        "--label_key",
        "label",
        "--apply_chat_template",
        "--generate_max_len",
        "16",
        "--advantage_estimator",
        "group_norm",
        "--n_samples_per_prompt",
        "8",
        "--rollout_batch_size",
        str(PROMPTS_PER_ITERATION),
        "--micro_rollout_batch_size",
        "64",
        "--train_batch_size",
        "128",
        "--micro_train_batch_size",
        "16",
        "--actor_learning_rate",
        "2e-4",
        "--init_kl_coef",
        "0",
        "--max_samples",
        str(iterations * PROMPTS_PER_ITERATION),
        "--num_episodes",
        str(episodes),
        "--zero_stage",
        "2",
        "--logging_steps",
        "1",
        "--save_steps",
        "-1",
        "--seed",
        str(seed),
        *reward,
    ]


def heldout(
    model: str,
    limit: int,
    env: Path = ENV,
    rows_file: Path = REPO / "data/tiny/prompts/test.jsonl",
    turns: int = 3,
    turn_tokens: int = 16,
) -> dict[str, float]:
    """Greedy accuracy on the held-out questions with the environment answering (up to `turns` turns), the
    environment's extra_logs averaged over episodes (the retry world's first_try_right, the calculator's
    tool_calls), and the mean number of turns."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.agents.runner import AgentRunner, AgentSettings
    from alignment.datasets.prompts import PromptSample
    from alignment.rollout.hf_engine import HFEngine

    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()][:limit]
    texts = [tok.apply_chat_template(r["context_messages"], tokenize=False, add_generation_prompt=True) for r in rows]
    prompts = [PromptSample(t, tok(t, add_special_tokens=False)["input_ids"], r["label"]) for t, r in zip(texts, rows)]
    runner = AgentRunner(AgentSettings(str(env), turns, 60.0, 1024, turn_tokens), tok)
    with torch.no_grad():
        got = runner.run(
            prompts,
            1,
            HFEngine(lm, tok.eos_token_id, tok.pad_token_id, batch_size=64).generate,
            seed=0,
            temperature=1.0,
            top_p=1.0,
            logprobs=False,
            greedy=True,
        )
    return {
        "final": got.scored.rewards.mean().item(),
        **got.scored.logs,
        "turns": got.metrics["agent/turns"],
        "n": len(rows),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("sft")
    p.add_argument("out", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=VARIANTS[:2])
    p.add_argument(
        "--episodes",
        type=int,
        default=1,
        help="passes over the prompts (--num_episodes); runs with more than one are keyed <variant> xN",
    )
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cache = a.out / "agent_learning.json"
    results = json.loads(cache.read_text()) if cache.exists() else {}
    if "sft" not in results:
        results["sft"] = heldout(a.sft, a.limit)
    for seed in a.seeds:
        for variant in a.variants:
            name = variant if a.episodes == 1 else f"{variant} x{a.episodes}"
            key = f"{name}/{seed}"
            if key in results:
                continue
            out = a.out / name.replace(" ", "_") / str(seed)
            t0 = time.time()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "alignment.cli.train_ppo",
                    *rl_flags(a.sft, out, seed, a.iterations, variant, a.episodes),
                ],
                cwd=REPO,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            results[key] = {**heldout(str(out), a.limit), "wall_s": time.time() - t0}
            cache.write_text(json.dumps(results, indent=1))
            print(key, results[key], flush=True)
    cache.write_text(json.dumps(results, indent=1))
    print(table(results, a.iterations))


def table(results: dict, iterations: int) -> str:
    sft = results["sft"]
    lines = [
        "| model | first-turn accuracy | final accuracy (up to 3 tries) | mean turns | RL wall time |",
        "|---|---|---|---|---|",
        f"| SFT start | {sft['first_try_right']:.1%} | {sft['final']:.1%} | {sft['turns']:.2f} | - |",
    ]
    names = sorted(
        {k.rsplit("/", 1)[0] for k in results if "/" in k}, key=lambda n: (VARIANTS.index(n.split(" x")[0]), n)
    )
    for variant in names:
        runs = [v for k, v in results.items() if k.startswith(variant + "/")]
        if not runs:
            continue

        def stat(key: str, pct: bool = True) -> str:
            xs = [r[key] for r in runs]
            m, s = statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)
            return f"{m:.1%} ± {s:.1%}" if pct else f"{m:.2f}"

        its = iterations * (int(variant.split(" x")[1]) if " x" in variant else 1)  # xN: N passes over the prompts
        lines.append(
            f"| {variant} RL, {its} iterations, {len(runs)} seed(s) | {stat('first_try_right')} | "
            f"{stat('final')} | {stat('turns', False)} | {statistics.mean(r['wall_s'] for r in runs):.0f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
