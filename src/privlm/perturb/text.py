"""Perturbing text word by word, with the guarantee per word and per document."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privlm.perturb.mechanisms import WordMechanism, clip_rows
from privlm.perturb.vocabulary import Vocabulary

# runs of letters/digits, or any other single non-space character; perturb.js uses
# /[\p{L}\p{N}]+|\S/gu, the same classes
TOKEN = re.compile(r"[^\W_]+|\S")


NEWLINE = re.compile(r"\r\n|\n")  # the service's loader splits records at these only


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text)


def split_lines(text: str) -> list[str]:
    """Lines at \\n or \\r\\n, a final empty line dropped (as perturb.js does, and as the
    service's loader splits records: privlm.data.user_files.lines_of)."""
    lines = NEWLINE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


@dataclass(frozen=True)
class PerturbedText:
    text: str
    words: int
    word_guarantee: dict[str, Any]
    document_guarantee: dict[str, Any]  # the whole text as one unit (all its words)
    line_guarantee: dict[str, Any]  # the longest line as one unit

    def to_dict(self) -> dict[str, Any]:
        return {
            "words": self.words,
            "per_word": self.word_guarantee,
            "per_document": self.document_guarantee,
            "per_line_max": self.line_guarantee,
        }


def perturb_words(
    words: list[str],
    vocab: Vocabulary,
    mechanism: WordMechanism,
    uniforms: Callable[[int], NDArray[np.float64]],
) -> list[str]:
    """Each word → clip(φ(w)) + noise → nearest vocabulary word."""
    if not words:
        return []
    d = vocab.dim
    k = mechanism.uniforms_per_word(d)
    u = uniforms(k * len(words)).reshape(len(words), k)
    base = clip_rows(np.stack([vocab.embed(w) for w in words]), mechanism.clip)
    noisy = base + np.stack([mechanism.noise(u[i], d) for i in range(len(words))])
    return [vocab.words[i] for i in vocab.nearest(noisy)]


def perturb_text(
    text: str,
    vocab: Vocabulary,
    mechanism: WordMechanism,
    uniforms: Callable[[int], NDArray[np.float64]],
) -> PerturbedText:
    """Perturb every word; lines are kept (one record per line), words joined by spaces."""
    lines = split_lines(text)
    tokens = [tokenize(line) for line in lines]
    flat = [w for t in tokens for w in t]
    out = iter(perturb_words(flat, vocab, mechanism, uniforms))
    perturbed = "\n".join(" ".join(next(out) for _ in t) for t in tokens)
    longest = max((len(t) for t in tokens), default=0)
    return PerturbedText(
        perturbed,
        len(flat),
        mechanism.word_guarantee(),
        mechanism.document_guarantee(len(flat)),
        mechanism.document_guarantee(longest),
    )
