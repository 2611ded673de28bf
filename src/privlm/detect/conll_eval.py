"""Detector quality on CoNLL-2003: recall and precision of entity tokens.

A sentence is detokenised by joining its tokens with spaces. A token counts as flagged if a
detected span overlaps it, and as sensitive if its gold tag is not ``O`` (PER, ORG, LOC,
MISC). Entity recall counts an entity as caught only if every one of its tokens is flagged.
Contextual levels flag far more than entities, so their precision against CoNLL's entities
is low by design; their recall is what protects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from privlm.data.corpora import NerSentence
from privlm.detect.base import Detector, Span


@dataclass(frozen=True)
class DetectorQuality:
    detector: str
    sentences: int
    tokens: int
    entity_tokens: int
    flagged_tokens: int
    token_recall: float
    token_precision: float
    entity_recall: float
    flagged_fraction: float
    recall_by_type: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sentence_text(tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Tokens joined by spaces, with each token's character offsets."""
    offsets, pos = [], 0
    for t in tokens:
        offsets.append((pos, pos + len(t)))
        pos += len(t) + 1
    return " ".join(tokens), offsets


def flagged_tokens(offsets: Sequence[tuple[int, int]], spans: Sequence[Span]) -> list[bool]:
    return [any(s.start < e and b < s.end for s in spans) for b, e in offsets]


def gold_entities(tags: Sequence[str]) -> list[tuple[str, list[int]]]:
    """IOB1 entities as (type, token indices)."""
    out: list[tuple[str, list[int]]] = []
    prev = "O"
    for i, tag in enumerate(tags):
        if tag == "O":
            prev = "O"
            continue
        kind = tag.split("-", 1)[1]
        if tag.startswith("B-") or prev != kind:
            out.append((kind, [i]))
        else:
            out[-1][1].append(i)
        prev = kind
    return out


def results_line(tokens: Sequence[str]) -> bool:
    """Whether a CoNLL sentence is a line of a sports results table ("Sheffield 21 10 0 11
    574 696 20", "Raith 0 Motherwell 3"): it has a number, and at least as many tokens
    with a digit as alphabetic ones. CoNLL's news wire is full of them; a team there is a
    bare place name at a line's start, which no cue marks as an organisation. Used to
    report recall with and without them (docs/results.md), never by a detector."""
    numbers = sum(any(c.isdigit() for c in t) for t in tokens)
    words = sum(t[:1].isalpha() and not any(c.isdigit() for c in t) for t in tokens)
    return numbers >= 1 and numbers >= words


def evaluate_on_conll(detector: Detector, sentences: Sequence[NerSentence]) -> DetectorQuality:
    """Token recall and precision, entity recall, by entity type (module docstring)."""
    import time

    t0 = time.perf_counter()
    texts, offsets = zip(*(sentence_text(s.tokens) for s in sentences), strict=True)
    detected = detector.detect(list(texts))
    seconds = time.perf_counter() - t0
    tokens = gold = flagged = hit = 0
    ents = caught = 0
    by_type: Counter[str] = Counter()
    caught_by_type: Counter[str] = Counter()
    for sent, offs, spans in zip(sentences, offsets, detected, strict=True):
        flags = flagged_tokens(offs, spans)
        tokens += len(flags)
        for f, tag in zip(flags, sent.tags, strict=True):
            g = tag != "O"
            gold += g
            flagged += f
            hit += f and g
        for kind, idx in gold_entities(sent.tags):
            ents += 1
            by_type[kind] += 1
            if all(flags[i] for i in idx):
                caught += 1
                caught_by_type[kind] += 1
    return DetectorQuality(
        detector=detector.name,
        sentences=len(sentences),
        tokens=tokens,
        entity_tokens=gold,
        flagged_tokens=flagged,
        token_recall=hit / gold if gold else float("nan"),
        token_precision=hit / flagged if flagged else float("nan"),
        entity_recall=caught / ents if ents else float("nan"),
        flagged_fraction=flagged / tokens if tokens else float("nan"),
        recall_by_type={k: caught_by_type[k] / n for k, n in sorted(by_type.items())},
        seconds=seconds,
    )
