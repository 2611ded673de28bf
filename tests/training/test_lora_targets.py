"""LoRA target discovery finds every projection, for llama and GPT-2 (Conv1D) models."""

from __future__ import annotations

import pytest
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.training.lora_targets import check_targets, discover_lora_targets, matched_modules

LLAMA = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


def tiny_gpt2():
    return GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=0)
    )


def test_llama_targets_and_peft_adapts_them_all(tiny):
    targets = discover_lora_targets(tiny.model)
    assert targets == LLAMA
    assert len(matched_modules(tiny.model, targets)) == 2 * 7
    model = get_peft_model(load_public_model("tiny").model, LoraConfig(r=2, target_modules=targets))
    wrapped = {n.removesuffix(".lora_A") for n, _ in model.named_modules() if n.endswith(".lora_A")}
    assert len(wrapped) == 14


def test_gpt2_conv1d_targets():
    model = tiny_gpt2()
    targets = discover_lora_targets(model)
    assert targets == ["c_attn", "c_fc", "c_proj"]
    assert len(matched_modules(model, targets)) == 2 * 4  # c_proj is in attention and MLP
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=targets, fan_in_fan_out=True))
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) > 0


def test_targets_matching_nothing_are_refused(tiny):
    with pytest.raises(PrivlmError, match=r"match no linear layer"):
        check_targets(tiny.model, ["c_attn"])  # GPT-2 names on a llama model
    assert "lm_head" not in discover_lora_targets(tiny.model)
