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
    model = (AutoModelForSequenceClassification.from_pretrained(tiny_base, num_labels=1) if task == "SEQ_CLS"
             else AutoModelForCausalLM.from_pretrained(tiny_base))
    peft_model = apply_lora(model, 8, 16, 0.0, ["q_proj", "v_proj"], task)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name or "score" in name:
            torch.nn.init.normal_(p, std=0.1)          # trained adapters and head: a merge that changes weights
    expected = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    got = merged_state(peft_model, {k: v.detach().clone() for k, v in peft_model.state_dict().items()})
    assert set(got) == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert not torch.equal(got["model.layers.0.self_attn.q_proj.weight"],
                           model.get_submodule("model.layers.0.self_attn.q_proj").base_layer.weight)
