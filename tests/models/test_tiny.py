"""The tiny test model: llama, 2 layers, hidden 64, SmolLM2's tokenizer, deterministic."""

from __future__ import annotations

import torch

from privlm.models import build_tiny_model, load_public_model, load_tokenizer


def test_shape_and_tokenizer(tiny):
    cfg = tiny.model.config
    assert cfg.model_type == "llama"
    assert (cfg.num_hidden_layers, cfg.hidden_size) == (2, 64)
    assert cfg.vocab_size == len(tiny.tokenizer) == 49152
    assert tiny.tokenizer.pad_token is not None
    smol_tok = load_tokenizer("smollm2-135m")
    text = "Patient 4471 was discharged on 3 March."
    assert tiny.tokenizer(text)["input_ids"] == smol_tok(text)["input_ids"]


def test_deterministic_per_seed():
    tok = load_tokenizer("tiny")
    a, b, c = build_tiny_model(tok, 0), build_tiny_model(tok, 0), build_tiny_model(tok, 1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_building_does_not_disturb_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_public_model("tiny")
    assert torch.equal(torch.rand(3), expected)
