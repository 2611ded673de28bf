"""The ``tiny`` model for tests: a 2-layer llama with hidden size 64 and SmolLM2's tokenizer.

Its weights are a deterministic function of the seed, so tests are reproducible without
any download or cache of weights.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase


def tiny_config(tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> LlamaForCausalLM:
    """A freshly initialised tiny llama; the same seed gives the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(tokenizer))
    model.eval()
    return model
