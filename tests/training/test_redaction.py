"""Redaction for JFT (A.2): one ``<mask>`` slot per span, left out of the loss and of its
normalisation; checked against transformers' own loss and hand counts."""

from __future__ import annotations

import pytest
import torch

from privlm.detect import Span
from privlm.errors import PrivlmError
from privlm.training.redaction import (
    IGNORE,
    embed_with_masks,
    encode_redacted,
    mask_embedding,
    masked_lm_loss,
    redacted_blocks,
    redacted_sequences,
    redacted_token_fraction,
    sensitive_tokens_seen,
    spans_of_literal_masks,
)

TEXT = "Did you hear Alice is getting divorced? Call 555-1234."


def spans_for(text, *words):
    return [Span(text.index(w), text.index(w) + len(w), "X") for w in words]


def test_each_span_becomes_one_mask_slot_and_the_rest_is_unchanged(tiny):
    tok = tiny.tokenizer
    spans = spans_for(TEXT, "Alice", "555-1234")
    ids, masked = encode_redacted(tok, TEXT, spans)
    assert sum(masked) == 2
    pieces = [None if m else i for i, m in zip(ids, masked, strict=True)]
    first = pieces.index(None)
    assert tok.decode(ids[:first]) == "Did you hear"
    second = pieces.index(None, first + 1)
    assert tok.decode(ids[first + 1 : second]) == " is getting divorced? Call"
    assert tok.decode(ids[second + 1 :]) == "."
    secret_ids = set(tok(" Alice", add_special_tokens=False)["input_ids"])
    assert not secret_ids & {i for i, m in zip(ids, masked, strict=True) if not m}


def test_overlapping_spans_are_refused(tiny):
    with pytest.raises(PrivlmError, match="overlap"):
        encode_redacted(tiny.tokenizer, TEXT, [Span(0, 5), Span(3, 8)])


def test_sequences_ignore_masks_and_padding_in_the_labels(tiny):
    enc = redacted_sequences(
        tiny.tokenizer, [TEXT, "short"], [spans_for(TEXT, "Alice"), []], block_size=64
    )
    assert enc.ids.shape == enc.labels.shape == enc.masked.shape
    assert (enc.labels[enc.masked] == IGNORE).all()
    assert enc.masked[0].sum() == 1 and not enc.masked[1].any()
    n_short = len(tiny.tokenizer("short", add_special_tokens=False)["input_ids"]) + 1
    assert (enc.labels[1, :n_short] != IGNORE).all() and (enc.labels[1, n_short:] == IGNORE).all()


def test_packed_blocks_carry_the_masks(tiny):
    enc = redacted_blocks(tiny.tokenizer, [TEXT] * 6, [spans_for(TEXT, "Alice")] * 6, 16)
    assert enc.ids.size(1) == 16
    assert int(enc.masked.sum()) >= 1
    assert (enc.labels == enc.ids.masked_fill(enc.masked, IGNORE)).all()


@pytest.mark.fast
def test_literal_mask_markers_of_a_sanitised_file():
    text = "Did <mask> hear <mask> is getting divorced?"
    spans = spans_of_literal_masks(text)
    assert [text[s.start : s.end] for s in spans] == ["<mask>", "<mask>"]


def test_unredacted_loss_is_transformers_loss(tiny):
    ids = torch.randint(0, 1000, (3, 12))
    labels = ids.clone()
    labels[0, 5:] = IGNORE
    out = tiny.model(input_ids=ids, labels=labels)
    assert float(masked_lm_loss(out.logits, labels, per_example=False)) == pytest.approx(
        float(out.loss), rel=1e-5
    )


@pytest.mark.fast
def test_masks_are_excluded_from_the_loss_and_its_normalisation():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11)
    labels = torch.randint(0, 11, (2, 6))
    labels[0, 3] = IGNORE  # a mask slot
    labels[1, 5] = IGNORE  # padding
    # by hand: the mean of the counted terms only
    terms = [[], []]
    for b in range(2):
        for t in range(5):
            y = int(labels[b, t + 1])
            if y != IGNORE:
                terms[b].append(-torch.log_softmax(logits[b, t], -1)[y])
    flat = torch.stack(terms[0] + terms[1])
    assert masked_lm_loss(logits, labels, per_example=False) == pytest.approx(float(flat.mean()))
    per = (torch.stack(terms[0]).mean() + torch.stack(terms[1]).mean()) / 2
    assert masked_lm_loss(logits, labels, per_example=True) == pytest.approx(float(per))
    # what sits at the masked target does not matter, and gets no gradient
    logits.requires_grad_(True)
    masked_lm_loss(logits, labels, per_example=True).backward()
    assert torch.count_nonzero(logits.grad[0, 2]) == 0
    assert torch.count_nonzero(logits.grad[0, 1]) > 0


def test_the_mask_input_is_the_mean_embedding_without_a_mask_token(tiny):
    assert tiny.tokenizer.mask_token_id is None
    vec = mask_embedding(tiny.model, tiny.tokenizer)
    table = tiny.model.get_input_embeddings().weight
    assert torch.allclose(vec, table.mean(0))
    ids = torch.tensor([[5, 6, 7]])
    masked = torch.tensor([[False, True, False]])
    emb = embed_with_masks(tiny.model, ids, masked, vec)
    assert torch.equal(emb[0, 1], vec) and torch.equal(emb[0, 0], table[5])


def test_redacted_token_fraction_counts_model_tokens(tiny):
    tok = tiny.tokenizer
    n = len(tok(TEXT, add_special_tokens=False)["input_ids"])
    k = len(tok(" Alice", add_special_tokens=False)["input_ids"])
    frac = redacted_token_fraction(tok, [TEXT], [spans_for(TEXT, "Alice")])
    assert frac == pytest.approx(k / n)


def test_sensitive_tokens_seen_counts_the_secret_tokens_no_redaction_covers(tiny):
    tok = tiny.tokenizer
    gold = [spans_for(TEXT, "Alice", "555-1234")]
    n_alice = len(tok(" Alice", add_special_tokens=False)["input_ids"])
    n_gold = round(redacted_token_fraction(tok, [TEXT], gold) * len(tok(TEXT)["input_ids"]))
    assert sensitive_tokens_seen(tok, [TEXT], gold, [[]]) == (n_gold, n_gold)
    assert sensitive_tokens_seen(tok, [TEXT], gold, gold) == (n_gold, 0)
    caught_phone = [spans_for(TEXT, "555-1234")]
    assert sensitive_tokens_seen(tok, [TEXT], gold, caught_phone) == (n_gold, n_alice)
    # a span that overlaps part of a token covers that token (it is masked whole)
    part = [[Span(TEXT.index("Alice") + 2, TEXT.index("Alice") + 3, "X")]]
    assert sensitive_tokens_seen(tok, [TEXT], [spans_for(TEXT, "Alice")], part)[1] == 0
