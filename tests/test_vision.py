"""Images through the stages (docs/vision.md), on the tiny visual world: SFT of the tiny LLaVA from its
rows' image paths; DPO with both answers seeing the picture; an agent whose environment answers with pictures.
The sft-grpo pipeline on pictures runs as its deployment (tests/test_deployment.py); the vLLM engine's path with
images as OpenRLHF's VLM script line (tests/test_openrlhf_v011.py)."""

from __future__ import annotations

import asyncio
import json
import textwrap

import pytest
import torch

from alignment.tiny_world.paths import tiny_vision_dir
from tests.conftest import metric_rows, run_module

pytestmark = pytest.mark.integration

V = tiny_vision_dir()
IMAGES = ["--apply_chat_template", "--data.image_key", "images", "--data.max_images_per_prompt", "1"]

# An agent file as an OpenRLHF user writes one for a VLM (the pattern of its vlm_multiturn_agent.py, import line
# included), for the tiny template: the first step answers with a picture (a "screenshot"), the second scores.
PICTURE_AGENT = textwrap.dedent("""
    import numpy as np
    import torch
    from PIL import Image

    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    USER_START = "\\n<|user|>\\n"
    USER_END = "<|end|>\\n<|assistant|>\\n"
    IMAGE_PLACEHOLDER = "<image>"


    def get_screenshot_from_environment(seed):
        rng = np.random.RandomState(seed)
        return Image.fromarray(rng.randint(0, 256, (28, 28, 3), dtype=np.uint8))


    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.step_idx = 0

        async def reset(self, states: dict, **kwargs):
            self.step_idx = 0
            return {"observation": states["observation"]}

        async def step(self, states: dict, **kwargs):
            self.step_idx += 1
            if self.step_idx >= 2:
                reward = 1.0 if states["label"] in states["action_text"] else 0.0
                return {"rewards": torch.tensor(reward), "scores": torch.tensor(reward),
                        "environment_feedback": "\\n<|end|>\\n", "done": True,
                        "extra_logs": {"step_count": self.step_idx}}
            return {
                "rewards": torch.tensor(0.0),
                "environment_feedback": f"{USER_START}{IMAGE_PLACEHOLDER}\\nThe screen. Next?\\n{USER_END}",
                "environment_images": [get_screenshot_from_environment(int(states["label"]))],
                "done": False,
            }


    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)
""")


@pytest.fixture(scope="module")
def vision_sft(module_tmp):
    """A few SFT steps of the tiny LLaVA on pictures (json@ the split folder: the rows' relative paths)."""
    from alignment.tiny_world.vision_model import make_vision_base

    base = make_vision_base(module_tmp / "base", seed=0)
    out = module_tmp / "sft"
    run_module(
        "alignment.cli.train_sft",
        [
            *["--pretrain", str(base), "--dataset", f"json@{V / 'sft'}", "--input_key", "input"],
            *["--output_key", "output", *IMAGES, "--save_path", str(out), "--max_samples", "64"],
            *["--train_batch_size", "16", "--micro_train_batch_size", "8", "--max_len", "128", "--max_epochs", "1"],
            *["--learning_rate", "5e-4"],
        ],
    )
    return out


def test_sft_on_pictures_commits_a_model_that_plain_transformers_loads(vision_sft):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    assert (vision_sft / "MANIFEST.json").exists() and (vision_sft / "processor_config.json").exists()
    model = AutoModelForImageTextToText.from_pretrained(vision_sft)
    processor = AutoProcessor.from_pretrained(vision_sft)
    assert type(model).__name__ == "LlavaForConditionalGeneration" and processor.image_processor is not None
    assert "pipeline_tag: image-text-to-text" in (vision_sft / "README.md").read_text()  # its model card
    losses = [r["train/loss"] for r in metric_rows(vision_sft) if "train/loss" in r]
    assert len(losses) == 4 and all(0 < x < 10 for x in losses)


def test_dpo_on_pictures_gives_both_sides_of_a_pair_their_images(ray_head, vision_sft, tmp_path):
    """A pair's two answers are collated with the row's picture each; the sft-dpo flow on the tiny-vision recipe
    (no `pretrain`: the recipe makes its base) trains DPO on the pictures and commits."""
    from alignflow.flows.sft_dpo import sft_dpo_flow
    from alignment import storage
    from alignment.config import DPOConfig, parse_args
    from alignment.datasets.preference import PairTokenizer, collate_pairs
    from alignment.datasets.sources import read_rows
    from alignment.models.loading import load_tokenizer

    pairs = f"json@{V / 'preference'}"
    flags = ["--dataset", pairs, "--prompt_key", "prompt", "--chosen_key", "chosen", "--rejected_key", "rejected"]
    flags += ["--apply_chat_template", "--max_images_per_prompt", "1", "--max_len", "128"]
    cfg = parse_args(DPOConfig, ["--pretrain", str(vision_sft), *flags])
    tok = load_tokenizer(str(vision_sft))
    samples = PairTokenizer(tok, cfg, pairs)(read_rows(pairs, image_key="images")[:4])
    batch = collate_pairs(samples, False, tok.pad_token_id, None, processor=tok.processor).batch
    assert batch.images["pixel_values"].shape[0] == 8  # chosen then rejected, one picture each
    assert all(s.chosen.images == s.rejected.images and len(s.chosen.images) == 1 for s in samples)
    result = asyncio.run(
        sft_dpo_flow(
            run_name="vision-dpo",
            store=str(tmp_path / "store"),
            ray_address=ray_head,
            recipe="tiny-vision",
            sft={"max_steps": 2},
            preference={"max_steps": 4, "max_samples": 128, "logging_steps": 1},
        )
    )
    assert list(result) == ["tiny_base", "sft", "dpo"]
    text = storage.read_text(storage.file_in(result["dpo"]["model_uri"], "metrics.jsonl"))
    assert [r["step"] for r in map(json.loads, text.splitlines()) if "train/loss" in r] == [1, 2, 3, 4]


def test_an_environment_answering_with_pictures_on_the_hf_engine(vision_sft, tmp_path):
    """An agent file in OpenRLHF's VLM pattern (PICTURE_AGENT) on the HF engine: the second turn is generated
    from the prompt's picture and the environment's, and each training row carries exactly the pictures its
    tokens place; the actor's forward pass takes the batch."""
    from transformers import AutoModelForImageTextToText

    from alignment.agents.contract import AgentError
    from alignment.agents.runner import AgentRunner, AgentSettings
    from alignment.datasets.images import processor_of, prompt_ids
    from alignment.datasets.prompts import PromptSample
    from alignment.models.loading import load_tokenizer
    from alignment.ppo.batch import rollout_to_batch
    from alignment.rollout.hf_engine import HFEngine

    tok = load_tokenizer(str(vision_sft))
    processor = processor_of(tok)
    model = AutoModelForImageTextToText.from_pretrained(vision_sft).eval()
    engine = HFEngine(model, tok.eos_token_id, tok.pad_token_id, processor=processor)
    prompts = []
    for r in [json.loads(line) for line in (V / "prompts" / "train.jsonl").read_text().splitlines()[:4]]:
        text = tok.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is the sum?"}]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        image = str(V / "prompts" / r["images"][0])
        ids = prompt_ids(processor, tok, text, [image], "row")
        prompts.append(
            PromptSample(text, ids, r["label"], (image,), tuple(tok(text, add_special_tokens=False)["input_ids"]))
        )
    (tmp_path / "vlm_agent.py").write_text(PICTURE_AGENT)
    agent = AgentSettings(str(tmp_path / "vlm_agent.py"), 3, 10.0, 256, 6, max_images=2)
    got = AgentRunner(agent, tok).run(prompts, 2, engine.generate, seed=1, temperature=1.0, top_p=1.0, logprobs=False)
    batch = rollout_to_batch(got.rollout, tok.pad_token_id, processor)
    per_image = 64  # the tiny LLaVA's image tokens
    placed = [int((row == model.config.image_token_index).sum()) // per_image for row in batch.sequences]
    assert placed == [len(files) for files in got.rollout.images] == [2] * 8
    assert got.metrics["agent/turns"] == 2 and got.metrics["agent/images"] == 2
    with torch.no_grad():
        logits = model(input_ids=batch.sequences, attention_mask=batch.attention_mask, **batch.image_inputs()).logits
    assert torch.isfinite(logits).all()
    # the environment's picture counts against --max_images_per_prompt with the prompt's
    one = AgentRunner(AgentSettings(agent.path, 3, 10.0, 256, 6, max_images=1), tok)
    with pytest.raises(
        AgentError, match=r"episode 0\): the context holds 2 images, more than --max_images_per_prompt 1"
    ):
        one.run(prompts[:1], 1, engine.generate, seed=1, temperature=1.0, top_p=1.0, logprobs=False)
