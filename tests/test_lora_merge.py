"""models.lora.merged_state: folding LoRA adapters into their base weights in place gives exactly
PEFT's merge_and_unload (a causal LM, and a reward model whose value head trains in full)."""

from __future__ import annotations

import copy

import pytest
import torch

from alignment.models.lora import apply_lora, merged_state


@pytest.mark.parametrize("task", ["CAUSAL_LM", "SEQ_CLS"])
def test_merged_state_equals_peft_merge_and_unload(tiny_base, task):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = (
        AutoModelForSequenceClassification.from_pretrained(tiny_base, num_labels=1)
        if task == "SEQ_CLS"
        else AutoModelForCausalLM.from_pretrained(tiny_base)
    )
    peft_model = apply_lora(model, 8, 16, 0.0, ["q_proj", "v_proj"], task)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name or "score" in name:
            torch.nn.init.normal_(p, std=0.1)  # trained adapters and head: a merge that changes weights
    expected = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    got = merged_state(peft_model, {k: v.detach().clone() for k, v in peft_model.state_dict().items()})
    assert set(got) == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert not torch.equal(
        got["model.layers.0.self_attn.q_proj.weight"],
        model.get_submodule("model.layers.0.self_attn.q_proj").base_layer.weight,
    )


# Measured in a fresh process on a ~220 MB random Llama: the peak RSS (VmHWM, reset through
# /proc/self/clear_refs just before) grows by a few MB for the save-time merge (a deep copy and
# merge_and_unload, the control, grows by the whole model) and by about one model for the
# load-time merge, which has to load its base first.
MERGE_MEMORY = """
import copy, json, os, sys, torch
from pathlib import Path
from transformers import LlamaConfig, LlamaForCausalLM
from alignment.models.lora import apply_lora, merged_state
from alignment.models.loading import merged_adapter

def peak_growth_mb(fn):
    Path("/proc/self/clear_refs").write_text("5")          # peak RSS := current RSS
    status = lambda key: next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))
    before = status("VmRSS")
    fn()
    return (status("VmHWM") - before) / 1024

work, phase = Path(sys.argv[1]), sys.argv[2]
targets = ["q_proj", "v_proj", "gate_proj"]
if phase == "save":
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=8, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(work / "base")
    model = LlamaForCausalLM.from_pretrained(work / "base")         # the adapter then names its base
    peft = apply_lora(model, 8, 16, 0.0, targets, "CAUSAL_LM")
    peft.save_pretrained(work / "adapter")
    state = {k: v.detach().clone() for k, v in peft.state_dict().items()}   # what the trainer gathers
    out = {"model_mb": sum(p.numel() * p.element_size() for p in peft.parameters()) / 2**20,
           "save_merge": peak_growth_mb(lambda: merged_state(peft, state)),
           "deepcopy_merge": peak_growth_mb(lambda: copy.deepcopy(peft).merge_and_unload())}
else:
    os.environ["ALIGNFLOW_CACHE"] = str(work / "cache")
    out = {"load_merge": peak_growth_mb(lambda: merged_adapter(work / "adapter", "--pretrain"))}
print(json.dumps(out))
"""


def test_merging_lora_does_not_double_peak_memory(tiny_base, tmp_path):
    import json
    import subprocess
    import sys

    from transformers import AutoTokenizer

    from tests.conftest import python_env

    def run(phase: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", MERGE_MEMORY, str(tmp_path), phase],
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    save = run("save")
    AutoTokenizer.from_pretrained(tiny_base).save_pretrained(tmp_path / "adapter")  # the merged folder's tokenizer
    load = run("load")
    model = save["model_mb"]
    print(
        f"LoRA merge on a {model:.0f} MB model: peak RSS +{save['save_merge']:.0f} MB at save (a deep copy + "
        f"merge_and_unload: +{save['deepcopy_merge']:.0f} MB), +{load['load_merge']:.0f} MB to load and merge"
    )
    assert save["deepcopy_merge"] > 0.8 * model  # the measurement sees a second copy when there is one
    assert save["save_merge"] < 0.2 * model
    assert load["load_merge"] < 1.5 * model  # the base it loads, not base + merged copy


def test_an_adapter_that_names_no_base_is_one_clear_error(tmp_path):
    import json

    from alignment.models.loading import ModelLoadError, merged_adapter

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"task_type": "CAUSAL_LM", "base_model_name_or_path": None})
    )
    with pytest.raises(ModelLoadError, match="names no base model; set its base_model_name_or_path") as e:
        merged_adapter(tmp_path, "--pretrain")
    assert "\n" not in str(e.value)
