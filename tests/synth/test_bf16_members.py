"""DP synthetic text on a CPU in bfloat16: replacing one in-context member's records moves
that member's next-token distribution and nothing else, bit for bit, as in float32. The
synth proof (docs/sharp_edges.md, "DP synthetic text") charges one member's replacement
per unit; a batched bf16 product that let one row leak into another would void it."""

from __future__ import annotations

import pytest
import torch

from privlm.models import load_public_model
from privlm.predict.in_context import InContextEngine

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13], [31]]
REPLACED = [21, 22, 23, 24, 25, 26]  # member 1's records after one unit changed them
CONTEXT = [40, 41, 42]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_replacing_one_member_moves_only_its_row(dtype):
    lm = load_public_model("tiny", device="cpu", dtype=dtype)
    pad = lm.tokenizer.eos_token_id
    rows = [-1, 0, 1, 2]  # the public model, then the members
    before = InContextEngine(lm.model, PROMPTS, pad, width=8).log_probs(CONTEXT, rows)
    after_prompts = [PROMPTS[0], REPLACED, PROMPTS[2]]
    after = InContextEngine(lm.model, after_prompts, pad, width=8).log_probs(CONTEXT, rows)
    for row in (0, 1, 3):  # the public row and the two members left alone
        assert torch.equal(before[row], after[row]), (dtype, rows[row])
    assert not torch.equal(before[2], after[2])  # the replaced member did move
