"""The regular-expression detector: e-mail addresses, phone numbers, ID-like strings and
numbers (JFT §2: "a simple example of a secret detector is a regular expression")."""

from __future__ import annotations

import re
from collections.abc import Sequence

from privlm.detect.base import Span, merge_spans

# Order matters only for labels: overlapping matches are merged.
PATTERNS: dict[str, re.Pattern[str]] = {
    "EMAIL": re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"),
    # +1 (555) 123-4567, 555-123-4567, 555.123.4567, +44 20 7946 0958
    "PHONE": re.compile(r"(?<![\w+])\+?\d{1,3}?[ .-]?\(?\d{2,4}\)?(?:[ .-]\d{2,4}){2,3}\b"),
    # letters and digits mixed (AB123456, X7-99-Q), or digits with dashes (123-45-6789)
    "ID": re.compile(
        r"\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*\b"
        r"|\b\d+(?:-\d+)+\b"
    ),
    "NUMBER": re.compile(r"\b\d+(?:[.,]\d+)*\b"),
}


class RegexDetector:
    """Marks every match of ``PATTERNS`` (or the given subset of kinds)."""

    def __init__(self, kinds: Sequence[str] | None = None) -> None:
        kinds = list(kinds) if kinds is not None else list(PATTERNS)
        unknown = [k for k in kinds if k not in PATTERNS]
        if unknown:
            raise ValueError(f"unknown regex kinds {unknown}; known: {sorted(PATTERNS)}")
        self.kinds = kinds
        self.name = "regex"

    def detect_one(self, text: str) -> list[Span]:
        spans = [
            Span(m.start(), m.end(), kind)
            for kind in self.kinds
            for m in PATTERNS[kind].finditer(text)
        ]
        return merge_spans(spans)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self.detect_one(t) for t in texts]
