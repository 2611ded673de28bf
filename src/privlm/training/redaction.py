"""Redacted training data: each detected span becomes one ``<mask>`` position (JFT A.2).

- Every span, with the whitespace before it, is replaced by a single position whose input
  is the mask embedding.
- Mask positions are excluded from the loss and from its normalisation (``masked_lm_loss``):
  the model never learns to predict ``<mask>``, and a heavily redacted example is not
  down-weighted by its masks.
- The vocabulary is not extended. The mask embedding is the tokenizer's own mask token
  where it has one (as RoBERTa does), else the mean of the input embeddings, the vector
  transformers gives a newly added token. Adapters stay compatible with the public model,
  the batched prediction engine and every audit. It is frozen (LoRA trains no embedding),
  where the paper learns one extra row; see docs/sharp_edges.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.detect import Span
from privlm.errors import PrivlmError

IGNORE = -100
MASK_LITERAL = "<mask>"  # how a sanitised (manually screened) file marks a redaction


@dataclass(frozen=True)
class RedactedTensors:
    """Right-padded examples: ``ids`` (pad id where masked), ``masked`` (input is the mask
    embedding), ``labels`` (IGNORE at padding and masked positions)."""

    ids: torch.Tensor
    masked: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.ids.size(0))


def encode_redacted(
    tokenizer: PreTrainedTokenizerBase, text: str, spans: Sequence[Span]
) -> tuple[list[int], list[bool]]:
    """Token ids of ``text`` with each span (and the whitespace before it) one mask slot."""
    ids: list[int] = []
    masked: list[bool] = []
    pos = 0
    placeholder = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for s in sorted(spans):
        if s.start < pos:
            raise PrivlmError("redaction spans overlap; merge them first (merge_spans)")
        segment = text[pos : s.start].rstrip()
        if segment:
            piece = tokenizer(segment, add_special_tokens=False)["input_ids"]
            ids.extend(piece)
            masked.extend([False] * len(piece))
        ids.append(placeholder)
        masked.append(True)
        pos = s.end
    tail = text[pos:]
    if tail:
        piece = tokenizer(tail, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        masked.extend([False] * len(piece))
    return ids, masked


def spans_of_literal_masks(text: str, literal: str = MASK_LITERAL) -> list[Span]:
    """The ``<mask>`` markers of a manually sanitised text, as spans."""
    out, i = [], text.find(literal)
    while i >= 0:
        out.append(Span(i, i + len(literal), "MANUAL"))
        i = text.find(literal, i + len(literal))
    return out


def redacted_sequences(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    spans: Sequence[Sequence[Span]],
    block_size: int,
) -> RedactedTensors:
    """One example per text (+EOS, cut at ``block_size``), right-padded."""
    if len(texts) != len(spans):
        raise PrivlmError("one span list per text is needed")
    if not texts:
        raise PrivlmError("no texts to encode")
    rows = []
    for t, s in zip(texts, spans, strict=True):
        ids, m = encode_redacted(tokenizer, t, s)
        ids, m = [*ids, tokenizer.eos_token_id][:block_size], [*m, False][:block_size]
        rows.append((ids, m))
    width = max(len(r[0]) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    out_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, (ids, m) in enumerate(rows):
        n = len(ids)
        out_ids[i, :n] = torch.tensor(ids)
        out_mask[i, :n] = torch.tensor(m)
        labels[i, :n] = torch.tensor(ids)
    labels[out_mask] = IGNORE
    return RedactedTensors(out_ids, out_mask, labels)


def redacted_blocks(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    spans: Sequence[Sequence[Span]],
    block_size: int,
) -> RedactedTensors:
    """Texts joined by EOS and cut into blocks (packed, for non-private phase-1 training);
    a corpus shorter than one block becomes one shorter block."""
    ids: list[int] = []
    m: list[bool] = []
    for t, s in zip(texts, spans, strict=True):
        a, b = encode_redacted(tokenizer, t, s)
        ids.extend([*a, tokenizer.eos_token_id])
        m.extend([*b, False])
    if len(ids) < 2:
        raise PrivlmError("no tokens to train on")
    n = max(1, len(ids) // block_size)
    width = block_size if len(ids) >= block_size else len(ids)
    t_ids = torch.tensor(ids[: n * width]).view(n, width)
    t_mask = torch.tensor(m[: n * width]).view(n, width)
    labels = t_ids.masked_fill(t_mask, IGNORE)
    return RedactedTensors(t_ids, t_mask, labels)


def mask_embedding(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """The input vector of a mask slot (module docstring)."""
    table = cast(torch.nn.Embedding, model.get_input_embeddings()).weight.detach()
    if tokenizer.mask_token_id is not None:
        return table[tokenizer.mask_token_id].clone()
    return table.mean(0)


def embed_with_masks(
    model: torch.nn.Module, ids: torch.Tensor, masked: torch.Tensor, mask_vector: torch.Tensor
) -> torch.Tensor:
    """Input embeddings of ``ids`` with masked positions replaced by ``mask_vector``."""
    embedding: torch.nn.Module = cast(Any, model).get_input_embeddings()
    emb: torch.Tensor = embedding(ids)
    if bool(masked.any()):
        emb = torch.where(masked.unsqueeze(-1), mask_vector.to(emb.dtype), emb)
    return emb


def per_example_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each example's mean next-token cross-entropy over its counted positions, shape (B,)."""
    tok = torch.nn.functional.cross_entropy(  # float32 logits, whatever the model's dtype
        logits[:, :-1].float().reshape(-1, logits.size(-1)),
        labels[:, 1:].reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    ).view(labels.size(0), -1)
    return tok.sum(1) / (labels[:, 1:] != IGNORE).sum(1).clamp_min(1)


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor, per_example: bool) -> torch.Tensor:
    """Next-token cross-entropy over positions whose target is not IGNORE (padding, masks).

    ``per_example=False``: the mean over every counted token in the batch (non-private
    training). ``per_example=True``: each example's mean over its own counted tokens, then
    the mean over examples, so each example is one term, as DP-SGD clips per example."""
    if per_example:
        return per_example_losses(logits, labels).mean()
    tok = torch.nn.functional.cross_entropy(  # float32 logits, whatever the model's dtype
        logits[:, :-1].float().reshape(-1, logits.size(-1)),
        labels[:, 1:].reshape(-1),
        ignore_index=IGNORE,
        reduction="none",
    )
    return tok.sum() / (labels[:, 1:] != IGNORE).sum().clamp_min(1)


def redacted_token_fraction(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], spans: Sequence[Sequence[Span]]
) -> float:
    """The share of the model's tokens of the original texts that overlap a redacted span
    (JFT Table 2's "Pct")."""
    total = hit = 0
    for t, ss in zip(texts, spans, strict=True):
        for b, e in _token_offsets(tokenizer, t):
            total += 1
            hit += _overlaps(b, e, ss)
    return hit / total if total else 0.0


def _token_offsets(tokenizer: PreTrainedTokenizerBase, text: str) -> list[tuple[int, int]]:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [(int(b), int(e)) for b, e in enc["offset_mapping"]]


def _overlaps(b: int, e: int, spans: Sequence[Span]) -> bool:
    return any(s.start < e and b < s.end for s in spans)


def sensitive_tokens_seen(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    gold: Sequence[Sequence[Span]],
    redacted: Sequence[Sequence[Span]],
) -> tuple[int, int]:
    """(sensitive tokens, sensitive tokens left unredacted): how many of the model's tokens
    overlap a true sensitive span, and how many of those no redacted span covers, i.e. the
    secrets JFT's phase 1 trains on without noise (its Theorem 1 assumes zero)."""
    sensitive = seen = 0
    for t, g, r in zip(texts, gold, redacted, strict=True):
        for b, e in _token_offsets(tokenizer, t):
            if _overlaps(b, e, g):
                sensitive += 1
                seen += not _overlaps(b, e, r)
    return sensitive, seen
