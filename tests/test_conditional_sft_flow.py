"""The conditional-sft flow for real (Prefect ephemeral API -> Ray jobs on the session's head):
the policy's samples scored by the rule reward and prefixed with their score, SFT of the policy
on them, then generation on the held-out prompts asking for score 1.0 and for 0.0: the prefix
steers, so asking for 1.0 gives a higher mean reward (sampled accuracy) than asking for 0.0.
How much depends on how often the policy is wrong: from an SFT model sampling ~55 % right it was
57.8 % vs 51.8 %; from one sampling ~74 % right (after the packing change of 2026-11-25) the
effect nearly vanished at temperature 1.0 (72.0 % vs 71.2 %), so the scored samples are drawn at
temperature 1.5 (more wrong answers to learn the 0.0 prefix from) and 2,400 samples per side
are compared (standard error of the difference ~1.3 points).

That steering check is a learning target: it runs by hand with the demo tier (`make test-demo`). CI runs the
same flow on a few hundred samples and checks what it builds: the scored, prefixed data, the SFT on it from
the policy, generation under both prefixes."""

from __future__ import annotations

import asyncio
import json

import pytest

from alignflow.flows.conditional_sft import conditional_sft_flow
from alignment import storage

pytestmark = pytest.mark.integration


def test_the_flow_scores_prefixes_trains_and_generates_under_both_prefixes(ray_head, tiny_sft, tmp_path):
    result = asyncio.run(
        conditional_sft_flow(
            policy=str(tiny_sft),
            run_name="csft-small",
            store=str(tmp_path / "store"),
            recipe="tiny-csft",
            ray_address=ray_head,
            score={"max_samples": 64},
            sft={"max_epochs": 1},
            generate={"max_samples": 16},
        )
    )
    rows = [json.loads(line) for line in open(result["scored"])]
    assert len(rows) == result["scored_rows"] == 64 * 4
    assert {r["input"][: len("<rm_score>: 1.0 ")] for r in rows} == {"<rm_score>: 1.0 ", "<rm_score>: 0.0 "}
    sft_config = storage.read_manifest(result["model_uri"])["metadata"]["config"]
    assert sft_config["pretrain"] == str(tiny_sft) and sft_config["dataset"] == result["scored"]
    for prefix in ("1.0", "0.0"):
        generated = [json.loads(line) for line in open(result["generated"][prefix]["output"])]
        assert len(generated) == 16 * 8 and all(
            g["input"].startswith(f"<rm_score>: {prefix} <|user|>") for g in generated
        )
        assert 0.0 <= result["generated"][prefix]["mean_reward"] <= 1.0


@pytest.mark.demo  # a learning target (make test-demo, by hand): ~4 minutes here
def test_the_score_prefix_steers_generation(ray_head, tiny_sft, tmp_path):
    store = str(tmp_path / "store")
    result = asyncio.run(
        conditional_sft_flow(
            policy=str(tiny_sft), run_name="csft", store=store, recipe="tiny-csft", ray_address=ray_head
        )
    )
    rows = [json.loads(line) for line in open(result["scored"])]
    assert len(rows) == result["scored_rows"] == 1024 * 4
    assert {r["input"][: len("<rm_score>: 1.0 ")] for r in rows} == {"<rm_score>: 1.0 ", "<rm_score>: 0.0 "}
    sft_config = storage.read_manifest(result["model_uri"])["metadata"]["config"]
    assert sft_config["pretrain"] == str(tiny_sft) and sft_config["dataset"] == result["scored"]
    high, low = (result["generated"][k]["mean_reward"] for k in ("1.0", "0.0"))
    generated = [json.loads(line) for line in open(result["generated"]["1.0"]["output"])]
    assert len(generated) == 2400 and all(g["input"].startswith("<rm_score>: 1.0 <|user|>") for g in generated)
    print(
        f"conditional SFT: sampled held-out accuracy asking for score 1.0: {high:.1%}, for 0.0: {low:.1%} "
        f"(scored data: mean reward {result['scored_mean_reward']:.3f})"
    )
    assert high > low + 0.01
