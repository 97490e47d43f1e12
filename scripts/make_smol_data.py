"""Writes data/smol/: the SmolLM2 recipe's SFT, preference and RL prompt sets in OpenRLHF's
message-list shape (deterministic; rerun to regenerate). Task: answer with only the number, for sums of two
two-digit numbers; the rejected answer is off by one (plus a short explanation a 135M instruct
model tends to add), so preference learning has something to push on. The reward model's pairs (rm/) differ
only in the sum."""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "smol"


def question(a: int, b: int) -> str:
    return f"What is {a} + {b}? Answer with the number only."


def rows(rng: random.Random, n: int) -> list[tuple[int, int]]:
    return [(rng.randint(10, 89), rng.randint(10, 89)) for _ in range(n)]


def main() -> None:
    rng = random.Random(2026)
    splits = {"train": rows(rng, 96), "test": rows(rng, 64)}
    for split, pairs in splits.items():
        sft, pref, prompts = [], [], []
        for a, b in pairs:
            user = {"role": "user", "content": question(a, b)}
            right = {"role": "assistant", "content": str(a + b)}
            wrong = {"role": "assistant", "content": f"The answer is {a + b + rng.choice((-1, 1))}."}
            sft.append(sft_row(a, b))
            pref.append({"chosen": [user, right], "rejected": [user, wrong]})
            prompts.append({"context_messages": [user], "label": str(a + b)})
        for name, data in (("sft", sft), ("preference", pref), ("prompts", prompts)):
            write(name, split, data)
    # RL's prompts: many more sums than SFT's 96 (a policy trained again and again on those 96 learns them, not
    # addition: 67 -> 73 % held-out while its sampled train reward reached 94 %), none of them held out; a generator
    # of its own, so the files above stay as they were
    held_out = set(splits["test"])
    rl_rng, rl = random.Random(2027), []
    while len(rl) < 1536:
        pair = rows(rl_rng, 1)[0]
        if pair not in held_out:
            rl.append(pair)
    write(
        "rl_prompts",
        "train",
        [{"context_messages": [{"role": "user", "content": question(a, b)}], "label": str(a + b)} for a, b in rl],
    )
    # SFT's training set: the last 512 of those sums (RL reads the first 512 through max_samples), replacing the 96
    # above. SFT on 96 sums answered 67.2 % held-out and GRPO could not lift it past ~88 %: its misses were double
    # carries SFT had never shown; SFT on these 512 answers 87.5 % and GRPO from there 92.2 %
    # (benchmarks/learning_notes_smollm2.md)
    write("sft", "train", [sft_row(a, b) for a, b in rl[1024:]])
    # the reward model's pairs (sft-rm-ppo): the right bare sum against a wrong bare one of the kinds the SFT model
    # gets wrong (a dropped carry: 89 + 31 -> 110; off by one or by ten), so the RM has to check the sum, not the
    # format (data/smol/preference's rejected answers differ in format too); sums neither held out nor RL prompts
    rm_rng, taken, rm = random.Random(2028), held_out | set(rl), []
    while len(rm) < 2048 + 128:
        pair = rows(rm_rng, 1)[0]
        if pair not in taken:
            taken.add(pair)
            rm.append(pair)
    for split, pairs in (("train", rm[:2048]), ("test", rm[2048:])):
        write("rm", split, [bare_pair(a, b, wrong_sum(a, b, rm_rng)) for a, b in pairs])


def sft_row(a: int, b: int) -> dict:
    user = {"role": "user", "content": question(a, b)}
    return {"messages": [user, {"role": "assistant", "content": str(a + b)}], "label": str(a + b)}


def wrong_sum(a: int, b: int, rng: random.Random) -> int:
    carried = a % 10 + b % 10 >= 10
    if carried and rng.random() < 0.5:
        return a + b - 10  # the carry dropped
    return a + b + rng.choice((-10, -1, 1, 10))


def bare_pair(a: int, b: int, wrong: int) -> dict:
    user = {"role": "user", "content": question(a, b)}
    return {
        "chosen": [user, {"role": "assistant", "content": str(a + b)}],
        "rejected": [user, {"role": "assistant", "content": str(wrong)}],
    }


def write(name: str, split: str, data: list[dict]) -> None:
    (OUT / name).mkdir(parents=True, exist_ok=True)
    (OUT / name / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))


if __name__ == "__main__":
    main()
