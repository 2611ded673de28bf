"""Records and datasets. Every record carries its privacy unit.

The privacy unit is what a guarantee protects: the record itself by default, or the user
(or group) id when the data has one. Partitioning and accounting work on units, never on
rows, so one user's records can never land in two parts of an ensemble.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from privlm.data.canonical import canonical_text


@dataclass(frozen=True)
class Record:
    """One example: its text, its privacy unit, an optional label, where it came from."""

    text: str
    unit: str
    label: str | None = None
    line: int | None = None
    fields: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Skip:
    """A row that was not turned into a record, and why. Skips are always reported."""

    line: int
    reason: str


@dataclass
class Dataset:
    """Records from one source, with the kind of privacy unit and what was skipped."""

    records: list[Record]
    source: str
    unit_kind: str = "record"  # "record" or "user"
    skipped: list[Skip] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def texts(self) -> list[str]:
        return [r.text for r in self.records]

    def units(self) -> list[str]:
        """The distinct privacy units, in first-seen order."""
        return list(dict.fromkeys(r.unit for r in self.records))

    def summary(self) -> dict[str, Any]:
        """Counts a user wants to see before training on this data."""
        lengths = [len(r.text) for r in self.records]
        labels = Counter(r.label for r in self.records if r.label is not None)
        skipped = Counter(s.reason for s in self.skipped)
        return {
            "source": self.source,
            "records": len(self.records),
            "privacy_unit": self.unit_kind,
            "units": len(self.units()),
            "labels": dict(sorted(labels.items())),
            "skipped": sum(skipped.values()),
            "skipped_by_reason": dict(skipped),
            "chars_total": sum(lengths),
            "chars_max": max(lengths, default=0),
            "chars_mean": (sum(lengths) / len(lengths)) if lengths else 0.0,
        }


def record_digest(text: str) -> str:
    """A record's identity for comparisons between files: SHA-256 of its text with runs of
    whitespace made one space (so a re-encoded copy matches; never shown)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


def shared_record_count(a: Iterable[Record], b: Iterable[Record]) -> int:
    """How many records of ``b`` have a text-bearing field (text or extra field) whose
    canonical form (:func:`privlm.data.canonical.canonical_text`: case, Unicode form,
    quotes, HTML escapes, zero-width characters, end punctuation) is that of a field of a
    record of ``a``."""

    def texts(r: Record) -> set[str]:
        return {canonical_text(t) for t in (r.text, *r.fields.values()) if t and t.strip()}

    seen = set().union(*(texts(r) for r in a))
    return sum(not texts(r).isdisjoint(seen) for r in b)


def content_digest(records: Iterable[Record]) -> str:
    """One digest of a file's records, order-free: equal for the same records uploaded
    twice, byte for byte or record for record."""
    digests = sorted(record_digest(r.text) for r in records)
    return hashlib.sha256("\n".join(digests).encode("ascii")).hexdigest()
