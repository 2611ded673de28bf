"""What a detector returns, and how detectors combine.

JFT's policy function F (Definition 2) marks each attribute of a record public or private;
a detector approximates it. Here attributes are character spans, so any tokenizer can map
them onto its own tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, order=True)
class Span:
    """Characters ``text[start:end]`` are sensitive; ``label`` says why (e.g. PERSON, EMAIL)."""

    start: int
    end: int
    label: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"a span needs 0 <= start < end, got [{self.start}, {self.end})")


class Detector(Protocol):
    """A secret detector. ``detect`` takes many texts at once so pipelines can batch."""

    name: str

    def detect(self, texts: Sequence[str]) -> list[list[Span]]: ...


def merge_spans(spans: Sequence[Span]) -> list[Span]:
    """Sorted spans with overlaps merged (labels joined by ``|``); touching spans stay apart,
    so two adjacent entities remain two ``<mask>`` tokens."""
    out: list[Span] = []
    for s in sorted(spans):
        if out and s.start < out[-1].end:
            last = out[-1]
            labels = last.label.split("|")
            label = last.label if s.label in labels else f"{last.label}|{s.label}"
            out[-1] = Span(last.start, max(last.end, s.end), label)
        else:
            out.append(s)
    return out


class UnionDetector:
    """Sensitive wherever any of its detectors says so (``regex+low-entity``)."""

    def __init__(self, detectors: Sequence[Detector]) -> None:
        if not detectors:
            raise ValueError("a union needs at least one detector")
        self.detectors = list(detectors)
        self.name = "+".join(d.name for d in self.detectors)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        found: list[list[Span]] = [[] for _ in texts]
        for d in self.detectors:
            for acc, spans in zip(found, d.detect(texts), strict=True):
                acc.extend(spans)
        return [merge_spans(s) for s in found]
