"""The shipped tiny visual world: deterministic splits and pictures, a LLaVA base that plain transformers
loads, the arithmetic reward scoring its answers."""

import json

import pytest
from PIL import Image

from alignment.tiny_world.paths import tiny_vision_dir
from alignment.tiny_world.reward import reward_func
from alignment.tiny_world.vision import QUESTION, VisionSpec, make_splits
from alignment.tiny_world.vision_model import CHAT_TEMPLATE, build_vision, make_vision_base


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_regenerated_world_equals_shipped(tmp_path):
    out = build_vision(tmp_path / "tiny_vision")
    shipped = tiny_vision_dir()
    # the generator's files; the shipped environment (agent_look_again.py) is written by hand
    texts = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.suffix != ".png")
    made = [p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file() and p.suffix not in (".png", ".py")]
    assert texts == sorted(made)
    for rel in texts:
        assert (out / rel).read_bytes() == (shipped / rel).read_bytes(), rel
    pngs = sorted(p.relative_to(out) for p in out.rglob("*.png"))
    assert pngs == sorted(p.relative_to(shipped) for p in shipped.rglob("*.png"))
    # pixels and palette, not bytes: another Pillow's zlib may pack the same picture differently
    for rel in pngs:
        new, old = Image.open(out / rel), Image.open(shipped / rel)
        assert (new.tobytes(), new.getpalette()) == (old.tobytes(), old.getpalette()), rel


def test_rows_name_their_pictures_and_eval_pictures_are_never_trained_on():
    root = tiny_vision_dir()
    spec = VisionSpec()
    splits, pictures = make_splits(spec, seed=0)
    used = {}
    for folder in ("sft", "preference", "prompts"):
        for split in ("train", "test"):
            for r in rows(root / folder / f"{split}.jsonl"):
                (path,) = r["images"]  # relative to the split's folder
                assert (root / folder / path).is_file(), path
                used.setdefault(split, set()).add(path)
                label = r.get("label") or r["output"].rsplit("= ", 1)[1]
                assert label == str(pictures[path.removeprefix("../")].problem.answer)
    assert not used["train"] & used["test"]
    assert len(rows(root / "sft" / "train.jsonl")) == spec.n_sft
    assert {r["input"] for r in rows(root / "prompts" / "test.jsonl")} == {QUESTION}
    with Image.open(root / "prompts" / rows(root / "prompts" / "test.jsonl")[0]["images"][0]) as img:
        assert img.size == (spec.size, spec.size)


def test_rejected_is_a_wrong_sum_and_the_reward_scores_responses():
    for r in rows(tiny_vision_dir() / "preference" / "train.jsonl")[:200]:
        prompt = f"<|user|>\n{r['prompt']}<|end|>\n<|assistant|>\n"
        queries = [prompt + r["chosen"] + "<|end|>", prompt + r["rejected"] + "<|end|>"]
        assert reward_func(queries, [prompt] * 2, [r["label"]] * 2) == [1.0, 0.0]


def test_chat_template_renders_strings_as_the_tiny_one_and_lists_with_image_tags():
    from jinja2 import Template

    from alignment.tiny_world.tokenizer import CHAT_TEMPLATE as TINY

    text = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5"}]
    assert Template(CHAT_TEMPLATE).render(messages=text) == Template(TINY).render(messages=text)
    listed = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is the sum?"}]}]
    rendered = Template(CHAT_TEMPLATE).render(messages=listed, add_generation_prompt=True)
    assert rendered == "<|user|>\n<image>What is the sum?<|end|>\n<|assistant|>\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_vision_base(tmp_path_factory.mktemp("vision") / "base", seed=0)


def test_base_reloads_with_plain_transformers_and_reads_a_picture(base):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(base).eval()
    proc = AutoProcessor.from_pretrained(base)
    row = rows(tiny_vision_dir() / "prompts" / "test.jsonl")[0]
    text = proc.apply_chat_template([{"role": "user", "content": row["input"]}], add_generation_prompt=True)
    with Image.open(tiny_vision_dir() / "prompts" / row["images"][0]) as img:
        batch = proc(images=[img.convert("RGB")], text=[text], return_tensors="pt")
    n_image = (batch["input_ids"] == model.config.image_token_index).sum().item()
    assert n_image == (VisionSpec().size // model.config.vision_config.patch_size) ** 2
    with torch.no_grad():
        logits = model(**batch).logits
        out = model.generate(**batch, max_new_tokens=3, do_sample=False)
    assert logits.shape[-1] == len(proc.tokenizer) and torch.isfinite(logits).all()
    assert out.shape[1] > batch["input_ids"].shape[1]
    # the same seed, the same weights
    again = AutoModelForImageTextToText.from_pretrained(make_vision_base(base.parent / "again", seed=0))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


@pytest.mark.parametrize("arch", ["llava", "idefics3"])
def test_an_expanded_context_goes_back_to_one_placeholder_per_picture(arch):
    """An agent's context is kept expanded; vLLM takes one placeholder per picture (it expands them itself), so
    each picture's expansion is put back — for both tiny architectures, with text between and after."""
    from alignment.datasets.images import RowImages, placeholder_form
    from alignment.tiny_world.vision_idefics import make_idefics3_processor
    from alignment.tiny_world.vision_model import make_processor

    processor = make_processor() if arch == "llava" else make_idefics3_processor()
    tok = processor.tokenizer
    files = [(tiny_vision_dir() / "images" / "train" / f"0000{i}.png").read_bytes() for i in (1, 2)]
    text = "<|user|>\n<image>What is it?<|end|>\n<|assistant|>\n3<|user|>\n<image>Again.<|end|>\n"
    expanded = RowImages(processor, files, "a context").ids(tok, text)
    assert len(expanded) > len(tok(text, add_special_tokens=False)["input_ids"])
    assert (
        placeholder_form(processor, list(expanded), files, "a context")
        == tok(text, add_special_tokens=False)["input_ids"]
    )
    with pytest.raises(ValueError, match="image 2's tokens are not in the context"):
        placeholder_form(processor, list(expanded)[: len(expanded) // 2], files, "a context")


def test_the_look_again_environment_answers_a_wrong_sum_with_a_picture():
    """data/tiny_vision/agent_look_again.py: a wrong first answer gets a hint picture ("> 7": the sum is larger)
    at the feedback's one placeholder; a right answer, or the second try, ends the episode."""
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location("env", tiny_vision_dir() / "agent_look_again.py")
    env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    agent = env.AgentInstance()
    wrong = asyncio.run(agent.step({"action_text": "3 + 4 = 7", "label": "9"}))
    assert not wrong["done"] and wrong["rewards"] == 0.0
    assert wrong["environment_feedback"].count("<image>") == len(wrong["environment_images"]) == 1
    hint = wrong["environment_images"][0].convert("L")
    assert hint.size == (56, 56) and hint.getextrema() == (0, 255)  # ink on paper
    assert env.hint_picture("> 7").tobytes() != env.hint_picture("< 7").tobytes()
    second = asyncio.run(agent.step({"action_text": "3 + 5 = 8", "label": "9"}))
    assert second["done"] and second["rewards"] == 0.0 and second["environment_images"] == []
    assert asyncio.run(env.AgentInstance().step({"action_text": "4 + 5 = 9", "label": "9"}))["rewards"] == 1.0
