"""Batched decoding across requests: every row sees what it would see decoded alone."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from privlm.predict.batching import DecodeBatch
from privlm.predict.engine import CachedDecoder, Prefill, upcast_log_softmax
from privlm.predict.protocol import Token


class Scripted:
    """A sequence that releases fixed tokens and drops rows on a fixed schedule."""

    def __init__(self, rows: list[int], tokens: list[int], drops: dict[int, list[int]]):
        self.rows, self.tokens, self.drops = list(rows), tokens, drops
        self.t, self.done, self.stopped = 0, False, None
        self.seen: list[torch.Tensor] = []

    def choose(self, log_probs: torch.Tensor) -> Token:
        self.seen.append(log_probs.clone())
        token = self.tokens[self.t]
        self.rows = self.drops.get(self.t, self.rows)
        self.t += 1
        self.done = self.t == len(self.tokens)
        return Token(token, True)


def alone(engine, prompt, seq) -> list[torch.Tensor]:
    """The log-probs ``seq`` sees decoded by itself."""
    decoder = CachedDecoder(engine, prompt, seq.rows)
    out = []
    for t, token in enumerate(seq.tokens):
        out.append(decoder.last.clone())
        if t == len(seq.tokens) - 1:
            break
        rows = seq.drops.get(t)
        if rows is not None:
            position = {r: i for i, r in enumerate(decoder.rows.tolist())}
            decoder.keep([position[r] for r in rows])
        decoder.advance(token)
    return out


def test_requests_joining_leaving_and_dropping_rows_see_their_own_distributions(engine):
    eng, _ = engine
    specs = [  # (prompt, rows, tokens, row drops after step t, step at which it joins)
        ([5, 17, 99, 3, 8, 41, 7], [-1, 0, 1, 2], [11, 12, 13, 14, 15], {1: [-1, 2]}, 0),
        ([21, 22], [-1, 3], [31, 32, 33], {}, 1),
        ([40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [-1, 1], [60, 61, 62, 63], {0: [-1]}, 2),
    ]
    batch, slots, expected = DecodeBatch(eng), [], []
    for prompt, rows, tokens, drops, _ in specs:
        expected.append(alone(eng, prompt, Scripted(rows, tokens, drops)))
    seqs = [Scripted(rows, tokens, drops) for _, rows, tokens, drops, _ in specs]
    for step in range(8):
        for i, (prompt, *_, joins) in enumerate(specs):
            if joins == step:
                prefill = Prefill(eng, prompt, seqs[i].rows, len(seqs[i].tokens)).run()
                slots.append(batch.join(seqs[i], prefill))
        for slot in list(slots):
            token = slot.seq.choose(slot.last)
            if slot.seq.done:
                batch.remove(slot)
                slots.remove(slot)
            else:
                slot.pending = token.id
        batch.step()
    assert not batch.slots and batch.cache is None
    for seq, want in zip(seqs, expected, strict=True):
        assert len(seq.seen) == len(want)
        for got, ref in zip(seq.seen, want, strict=True):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def test_a_prompt_prefilled_in_chunks_decodes_as_one_prefilled_whole(engine):
    """Chunks of 1, 3 and 7 tokens against one pass over all 23, with every position's logits
    (the pass before chunking and ``logits_to_keep``): the same next-token distribution, and
    the same after two more tokens decoded on each cache."""
    eng, _ = engine
    prompt, rows = [(7 * i + 3) % 500 for i in range(23)], [-1, 0, 2]
    ids = torch.tensor([prompt] * len(rows))
    cache = DynamicCache()
    logits, _ = eng.logits(ids, torch.tensor(rows), cache)
    whole = upcast_log_softmax(logits[:, -1])
    for chunk in (1, 3, 7):
        prefill = Prefill(eng, prompt, rows)
        passes = 0
        while not prefill.finished:
            assert prefill.last is None
            taken = prefill.advance(chunk)
            assert taken == min(chunk, 23 - chunk * passes)
            passes += 1
        assert passes == -(-23 // chunk)
        torch.testing.assert_close(prefill.last, whole, atol=1e-5, rtol=0)
    decoder = CachedDecoder(eng, prompt, rows)
    for token in (11, 12):
        ids = torch.full((len(rows), 1), token)
        logits, _ = eng.logits(ids, torch.tensor(rows), cache)
        torch.testing.assert_close(
            decoder.advance(token), upcast_log_softmax(logits[:, -1]), atol=1e-5, rtol=0
        )
    with pytest.raises(ValueError, match="not yet prefilled"):
        prefill.advance(1)
