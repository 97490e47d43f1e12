"""alignment.cli.import_model: a GGUF file, an HF folder in S3 without our manifest, pickled weights
and a re-import, each committed as a plain HF folder; a folder that is not a model is refused in one line."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from alignment import storage
from tests.conftest import run_module, smol_gguf

pytestmark = pytest.mark.integration


def test_smollm2_from_its_gguf_loads_with_plain_transformers_and_answers(smol):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = storage.read_manifest(str(smol))
    assert manifest["metadata"]["kind"] == "gguf" and manifest["metadata"]["gguf_file"] == smol_gguf().name
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(manifest["files"])
    assert not list(Path(smol).glob("*.gguf")) and not list(Path(smol).glob("*.bin"))
    tok = AutoTokenizer.from_pretrained(smol)
    model = AutoModelForCausalLM.from_pretrained(smol)
    assert sum(p.numel() for p in model.parameters()) > 100_000_000 and "im_start" in tok.chat_template
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    answer = tok.decode(
        model.generate(ids, max_new_tokens=12, do_sample=False)[0][ids.shape[1] :], skip_special_tokens=True
    )
    assert "Paris" in answer, answer


def test_hf_folder_in_s3_without_a_manifest_and_pickled_weights(tiny_base, tmp_path, s3_root):
    from transformers import AutoModelForCausalLM

    fs, path = storage.filesystem(f"{s3_root}/plain")
    for p in Path(tiny_base).iterdir():
        if p.name != storage.MANIFEST:  # a folder uploaded by someone else's tool
            fs.put_file(str(p), f"{path}/{p.name}")
    fs.pipe_file(f"{path}/stray.bin", b"not fetched")  # pickles beside safetensors are never read
    run_module("alignment.cli.import_model", [f"{s3_root}/plain", "--save_path", f"{s3_root}/imported"])
    manifest = storage.read_manifest(f"{s3_root}/imported")
    assert manifest["metadata"]["kind"] == "safetensors folder" and "stray.bin" not in manifest["files"]
    weights = (Path(tiny_base) / "model.safetensors").read_bytes()  # byte-identical weights
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(weights).hexdigest()

    pickled = tmp_path / "pickled"  # an older checkpoint: pytorch_model.bin only
    pickled.mkdir()
    torch.save(AutoModelForCausalLM.from_pretrained(tiny_base).state_dict(), pickled / "pytorch_model.bin")
    for f in [*Path(tiny_base).glob("tokenizer*"), Path(tiny_base) / "config.json"]:
        shutil.copy2(f, pickled / f.name)
    assert (pickled / "pytorch_model.bin").exists() and not list(pickled.glob("*.safetensors"))
    out = tmp_path / "resaved"
    run_module("alignment.cli.import_model", ["--source", str(pickled), "--save_path", str(out)])
    assert storage.read_manifest(str(out))["metadata"]["kind"] == "re-saved as safetensors"
    a, b = AutoModelForCausalLM.from_pretrained(out), AutoModelForCausalLM.from_pretrained(tiny_base)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    before = (out / "model.safetensors").read_bytes()
    bad = run_module(
        "alignment.cli.import_model", [str(tmp_path / "nothing_here"), "--save_path", str(out)], check=False
    )
    assert bad.returncode == 2 and (out / "model.safetensors").read_bytes() == before  # nothing lost
