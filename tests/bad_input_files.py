"""The bad files of tests/test_bad_input.py's corpus: what a user gets wrong, written once per module run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from alignment.tiny_world.paths import tiny_dir, tiny_vision_dir


def write_bad_files(bad: Path, tiny_base: Path) -> None:
    """The data, reward, YAML and model folders a user gets wrong, in `bad` (the corpus's @BAD@)."""
    from alignment.tiny_world.base_model import make_base

    good = (tiny_dir() / "sft/train.jsonl").read_text().splitlines()
    (bad / "latin1.jsonl").write_bytes(
        "\n".join(good[:2]).encode() + '\n{"input": "caf\xe9", "output": "x"}\n'.encode("latin-1")
    )
    (bad / "malformed.jsonl").write_text(good[0] + '\n{"input": "a", "output": }\n')
    (bad / "empty.jsonl").write_text("\n")
    (bad / "int_chosen.jsonl").write_text(
        '{"prompt": "p", "chosen": "a", "rejected": "b"}\n{"prompt": "p", "chosen": 5, "rejected": "b"}\n'
    )
    (bad / "typo.yaml").write_text("lerning_rate: 1e-5\n")
    (bad / "reward_signature.py").write_text("def reward_func(queries):\n    return [0.0] * len(queries)\n")
    (bad / "reward_length.py").write_text(
        "def reward_func(queries, prompts, labels, **kwargs):\n    return {'rewards': [1.0], 'extra_logs': {}}\n"
    )
    (bad / "reward_raises.py").write_text(
        "def reward_func(queries, prompts, labels):\n    raise ValueError('no label')\n"
    )
    (bad / "notes.txt").write_text("a file where a folder is meant\n")
    (bad / "null_prompt.jsonl").write_text('{"input": "p"}\n{"input": null}\n')
    (bad / "no_tokenizer").mkdir()
    for f in ("config.json", "model.safetensors"):  # a model folder someone forgot to save the tokenizer into
        shutil.copy(tiny_base / f, bad / "no_tokenizer" / f)
    make_base(bad / "other_vocab", seed=1, config_overrides={"vocab_size": 300})  # a teacher of another tokenizer
    (bad / "broken_template").mkdir()  # a model folder whose chat_template.jinja was edited by hand (no MANIFEST)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_base / f, bad / "broken_template" / f)
    (bad / "broken_template" / "chat_template.jinja").write_text(
        "{% for m in messages %}\n{{ m.content }\n{% endfor %}"
    )
    (bad / "no_template").mkdir()  # a base model's folder: no chat template in either place a tokenizer keeps it
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(tiny_base / f, bad / "no_template" / f)
    config = json.loads((tiny_base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bad / "no_template" / "tokenizer_config.json").write_text(json.dumps(config))
    (bad / "no_weights").mkdir()  # config and tokenizer saved, the weights not
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_base / f, bad / "no_weights" / f)
    (bad / "missing_shard").mkdir()  # a sharded model whose download stopped after the first shard
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_base / f, bad / "missing_shard" / f)
    shutil.copy(tiny_base / "model.safetensors", bad / "missing_shard" / "model-00001-of-00002.safetensors")
    shards = {"lm_head.weight": "model-00002-of-00002.safetensors", "x": "model-00001-of-00002.safetensors"}
    (bad / "missing_shard" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    (bad / "empty_model").mkdir()
    (bad / "config_only").mkdir()  # a config written by hand: no weights, no tokenizer
    (bad / "config_only" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (bad / "no_data").mkdir()
    (bad / "no_data" / "README.md").write_text("the data files were never copied\n")
    (bad / "empty_responses.jsonl").write_text(
        "".join(json.dumps({"input": f"What is {i} + 1?", "output": out}) + "\n" for i, out in enumerate(["", " ", ""]))
    )
    turns = [{"role": "user", "content": "What is 1 + 1?"}, {"role": "assistant", "content": ""}]
    (bad / "empty_turns.jsonl").write_text(
        json.dumps({"messages": turns}) + "\n" + json.dumps({"messages": turns}) + "\n"
    )
    (bad / "array_row.jsonl").write_text(good[0] + '\n["What is 1 + 1?", "2"]\n')
    (bad / "malformed.yaml").write_text("learning_rate: [1e-5\n")
    (bad / "list.yaml").write_text("- learning_rate: 1e-5\n")


def write_vision_files(bad: Path, vlm: Path) -> Path:
    """A tiny vision-language base at `vlm`, and in `bad` the image data and model folders a user gets wrong."""
    from alignment.tiny_world.vision_model import make_vision_base

    make_vision_base(vlm, seed=0)
    bad.mkdir()
    row = json.loads((tiny_vision_dir() / "sft/train.jsonl").read_text().splitlines()[0])
    image = (tiny_vision_dir() / "sft" / row["images"][0]).resolve()
    rows = lambda *rs: "".join(json.dumps({**row, **r}) + "\n" for r in rs)  # noqa: E731
    (bad / "missing.jsonl").write_text(rows({"images": [str(image)]}, {"images": ["pictures/nowhere.png"]}))
    (bad / "not_an_image.png").write_text("a text file named like an image\n")
    (bad / "unreadable.jsonl").write_text(rows({"images": [str(bad / "not_an_image.png")]}))
    (bad / "two_images.jsonl").write_text(rows({"input": "<image><image>Sum?", "images": [str(image)] * 2}))
    (bad / "no_tag.jsonl").write_text(rows({"input": "What is the sum?", "images": [str(image)]}))
    other = bad / "other_processor"  # the model's files beside a processor whose image token is another one
    shutil.copytree(vlm, other)
    config = json.loads((other / "config.json").read_text())
    key = "image_token_id" if "image_token_id" in config else "image_token_index"
    config[key] = config[key] - 1
    (other / "config.json").write_text(json.dumps(config))
    return vlm
