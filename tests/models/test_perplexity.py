"""Block perplexity equals exp of transformers' own mean LM loss on the same blocks."""

from __future__ import annotations

import math

import pytest
import torch

from privlm.models.perplexity import perplexity, token_blocks


def test_perplexity_matches_model_loss(tiny):
    texts = ["The quick brown fox jumps over the lazy dog."] * 20
    res = perplexity(
        tiny.model, tiny.tokenizer, texts, block_size=16, max_blocks=6, batch_size=4, progress=False
    )
    blocks = token_blocks(tiny.tokenizer, texts, 16, 6)
    with torch.no_grad():
        loss = tiny.model(input_ids=blocks, labels=blocks).loss
    assert res.blocks == 6 and res.tokens_scored == 6 * 15
    assert res.perplexity == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_too_little_text(tiny):
    with pytest.raises(ValueError, match="not enough text"):
        perplexity(tiny.model, tiny.tokenizer, ["hi"], block_size=512, progress=False)
