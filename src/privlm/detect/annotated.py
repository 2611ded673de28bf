"""Annotated text: a text with its true sensitive spans, each with a type.

The file format (JSON lines) that ``privlm detect eval``, ``detect miss-rate`` and JFT's
light noise read, one record per line, with character offsets:

- ``{"text": ..., "spans": [{"start": 0, "end": 4, "type": "PERSON"}, ...]}``, or the
  same spans as ``[start, end, type]`` lists;
- ``{"text": ..., "sensitive": [[start, end], ...]}`` (untyped: ``SENSITIVE``);
- ``{"text": ..., "secrets": ["substring", ...]}`` (every occurrence; ``SENSITIVE``).

CoNLL-2003 converts to it (``annotated_from_conll``): each entity one span of its type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privlm.data.corpora import NerSentence
from privlm.data.user_files import jsonl_rows
from privlm.detect.base import Span
from privlm.detect.conll_eval import gold_entities, sentence_text
from privlm.errors import DataError

UNTYPED = "SENSITIVE"


@dataclass(frozen=True)
class AnnotatedText:
    """A text with its true sensitive spans (``Span.label`` is the type)."""

    text: str
    sensitive: tuple[Span, ...]


def _span(raw: Any, text: str, where: tuple[Path, int]) -> Span:
    if isinstance(raw, dict):
        raw = [raw.get("start"), raw.get("end"), raw.get("type", UNTYPED)]
    ok = isinstance(raw, list) and len(raw) in (2, 3)
    ok = ok and all(isinstance(x, int) for x in raw[:2]) and 0 <= raw[0] < raw[1] <= len(text)
    if not ok:
        raise DataError(
            *where[:1], f"bad span {raw!r}: need [start, end] inside the text", where[1]
        )
    label = str(raw[2]) if len(raw) == 3 else UNTYPED
    return Span(int(raw[0]), int(raw[1]), label)


def _row(row: Any, p: Path, i: int) -> AnnotatedText:
    text = row.get("text") if isinstance(row, dict) else None
    if not isinstance(text, str):
        raise DataError(p, 'each line needs a "text" string', i)
    spans = [_span(s, text, (p, i)) for s in [*row.get("spans", []), *row.get("sensitive", [])]]
    for secret in row.get("secrets", []):
        j = text.find(secret) if isinstance(secret, str) and secret else -1
        if j < 0:
            raise DataError(p, f"secret {secret!r} does not occur in the text", i)
        while j >= 0:
            spans.append(Span(j, j + len(secret), UNTYPED))
            j = text.find(secret, j + 1)
    return AnnotatedText(text, tuple(sorted(spans)))


def load_annotated(path: str | Path) -> list[AnnotatedText]:
    """Read an annotated file (format in the module docstring); errors name file:line."""
    p = Path(path)
    if not p.is_file():
        raise DataError(p, "no such annotated file")
    rows = jsonl_rows(p, p.read_text(encoding="utf-8"))
    out = [_row(row, p, i) for i, row in rows]
    if not out:
        raise DataError(p, "the annotated file has no records")
    return out


def annotated_from_conll(sentences: Sequence[NerSentence]) -> list[AnnotatedText]:
    """CoNLL-2003 sentences, each entity one span of its type (PER, ORG, LOC, MISC)."""
    out = []
    for s in sentences:
        text, offsets = sentence_text(s.tokens)
        spans = tuple(
            Span(offsets[idx[0]][0], offsets[idx[-1]][1], kind)
            for kind, idx in gold_entities(s.tags)
        )
        out.append(AnnotatedText(text, spans))
    return out
