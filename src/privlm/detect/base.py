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


BRIDGEABLE = frozenset(" \t,/-.#:()")

# the types of span that name someone or something (a person, a place, an address, a body)
NAME_TYPES = frozenset({"PERSON", "GPE", "LOCATION", "NRP", "STREET_ADDRESS", "ORGANIZATION"})


def whole_words(text: str, spans: Sequence[Span]) -> list[Span]:
    """Merged spans, each name span that cuts a word widened to the whole word: a tagger
    that misses a name's first sub-word token finds "ayer" in "BayerVB", and the letters
    left in the text are half the name. Other types (an ID inside a longer token) are kept
    as found."""
    out: list[Span] = []
    for s in spans:
        start, end = s.start, s.end
        if not NAME_TYPES.isdisjoint(s.label.split("|")):
            while start > 0 and text[start - 1].isalnum() and text[start].isalnum():
                start -= 1
            while end < len(text) and text[end].isalnum() and text[end - 1].isalnum():
                end += 1
        out.append(Span(start, end, s.label))
    return merge_spans(out)


def bridge_spans(text: str, spans: Sequence[Span], max_gap: int = 3) -> list[Span]:
    """Merged spans, with the punctuation between and around them flagged too: two spans
    apart by at most ``max_gap`` characters of spaces and ``, / - . # : ( )`` become one
    ("Via Brenna" + ", " + "367"), and a span with an unclosed bracket takes the bracket that
    closes it ("Paciano (PG" → "Paciano (PG)"). Names and addresses come in pieces a tagger
    and a recogniser each find part of; the commas between them are no secret, but leaving
    them is what makes an address read as one."""
    out: list[Span] = []
    for s in merge_spans(spans):
        gap = text[out[-1].end : s.start] if out else ""
        if out and len(gap) <= max_gap and set(gap) <= BRIDGEABLE:
            last = out[-1]
            labels = last.label.split("|")
            label = last.label if s.label in labels else f"{last.label}|{s.label}"
            out[-1] = Span(last.start, max(last.end, s.end), label)
        else:
            out.append(s)
    return [_close_bracket(text, s) for s in out]


def _close_bracket(text: str, s: Span) -> Span:
    inside = text[s.start : s.end]
    end = s.end
    while end < len(text) and text[end] == " " and inside.count("(") > inside.count(")"):
        end += 1
    if inside.count("(") > inside.count(")") and end < len(text) and text[end] == ")":
        return Span(s.start, end + 1, s.label)
    return s


class UnionDetector:
    """Sensitive wherever any of its detectors says so (``regex+low-entity``); with
    ``bridge``, the punctuation between adjacent finds is flagged too (:func:`bridge_spans`),
    organisations take their legal form
    (:func:`privlm.detect.legal_forms.complete_organisations`), names run on over the
    capitalised words beside them and acronyms count as organisations
    (:func:`privlm.detect.name_runs.complete_names`)."""

    def __init__(self, detectors: Sequence[Detector], bridge: bool = False) -> None:
        if not detectors:
            raise ValueError("a union needs at least one detector")
        self.detectors = list(detectors)
        self.name = "+".join(d.name for d in self.detectors)
        self.bridge = bridge

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        found: list[list[Span]] = [[] for _ in texts]
        for d in self.detectors:
            for acc, spans in zip(found, d.detect(texts), strict=True):
                acc.extend(spans)
        if self.bridge:
            from privlm.detect.legal_forms import complete_organisations
            from privlm.detect.name_runs import complete_names

            bridged = (
                bridge_spans(t, whole_words(t, s)) for t, s in zip(texts, found, strict=True)
            )
            return [
                complete_names(t, complete_organisations(t, s))
                for t, s in zip(texts, bridged, strict=True)
            ]
        return [merge_spans(s) for s in found]
