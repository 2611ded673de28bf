"""How well a detector finds typed PII in annotated text.

Coverage is counted over non-blank characters, so "John Smith" caught as two spans is still
fully caught. For each gold type:

- **full-span recall**: gold spans whose every character is flagged (nothing readable left);
- **every-letter-and-digit recall**: gold spans whose every letter and digit is flagged (a
  comma or a bracket may stay readable);
- **any-overlap recall**: gold spans with at least one character flagged.

For each label the detector emits (its own types, which need not match the gold ones):

- **precision**: detected spans that overlap some gold span (a merged span counts for each
  of its labels);
- **over-redaction**: the share of its flagged characters that lie outside every gold span.

The overall row pools every span and character.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from privlm.detect.annotated import AnnotatedText
from privlm.detect.base import Detector, Span

ALL = "\0all"  # the pooled row's key while counting


@dataclass(frozen=True)
class TypeRecall:
    spans: int
    full: float
    overlap: float
    alnum: float = 0.0  # every letter and digit flagged (punctuation may stay)


@dataclass(frozen=True)
class LabelPrecision:
    spans: int
    precision: float
    over_redaction: float


@dataclass(frozen=True)
class PiiQuality:
    detector: str
    texts: int
    full_recall: float
    overlap_recall: float
    precision: float
    over_redaction: float
    recall_by_type: dict[str, TypeRecall] = field(default_factory=dict)
    precision_by_label: dict[str, LabelPrecision] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def seconds_per_1000(self) -> float:
        return 1000 * self.seconds / max(1, self.texts)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds_per_1000_texts": self.seconds_per_1000}


def _mask(text: str, spans: Sequence[Span]) -> np.ndarray:
    flags = np.zeros(len(text), dtype=bool)
    for s in spans:
        flags[s.start : s.end] = True
    return flags


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def score_texts(
    name: str, sample: Sequence[AnnotatedText], detected: Sequence[Sequence[Span]], seconds: float
) -> PiiQuality:
    """The quality table of ``detected`` against ``sample`` (module docstring)."""
    gold_n: dict[str, int] = defaultdict(int)
    full_n: dict[str, int] = defaultdict(int)
    over_n: dict[str, int] = defaultdict(int)
    alnum_n: dict[str, int] = defaultdict(int)
    det_n: dict[str, int] = defaultdict(int)
    hit_n: dict[str, int] = defaultdict(int)
    chars_n: dict[str, int] = defaultdict(int)
    outside_n: dict[str, int] = defaultdict(int)
    for item, spans in zip(sample, detected, strict=True):
        blank = np.array([c.isspace() for c in item.text], dtype=bool)
        alnum = np.array([c.isalnum() for c in item.text], dtype=bool)
        flagged, gold = _mask(item.text, spans), _mask(item.text, item.sensitive)
        for g in item.sensitive:
            inside = ~blank[g.start : g.end]
            covered = flagged[g.start : g.end][inside]
            gold_n[g.label] += 1
            full_n[g.label] += bool(covered.all())
            over_n[g.label] += bool(covered.any())
            letters = alnum[g.start : g.end]
            alnum_n[g.label] += bool(flagged[g.start : g.end][letters].all())
        for s in spans:
            inside = ~blank[s.start : s.end]
            hit = bool(gold[s.start : s.end].any())
            chars, outside = int(inside.sum()), int((inside & ~gold[s.start : s.end]).sum())
            for lab in [ALL, *sorted(set(s.label.split("|")))]:  # merged spans: every label
                det_n[lab] += 1
                hit_n[lab] += hit
                chars_n[lab] += chars
                outside_n[lab] += outside
    total = sum(gold_n.values())
    return PiiQuality(
        detector=name,
        texts=len(sample),
        full_recall=_ratio(sum(full_n.values()), total),
        overlap_recall=_ratio(sum(over_n.values()), total),
        precision=_ratio(hit_n.pop(ALL, 0), det_n.pop(ALL, 0)),
        over_redaction=_ratio(outside_n.pop(ALL, 0), chars_n.pop(ALL, 0)),
        recall_by_type={
            t: TypeRecall(n, full_n[t] / n, over_n[t] / n, alnum_n[t] / n)
            for t, n in sorted(gold_n.items())
        },
        precision_by_label={
            lab: LabelPrecision(n, hit_n[lab] / n, _ratio(outside_n[lab], chars_n[lab]))
            for lab, n in sorted(det_n.items())
        },
        seconds=seconds,
    )


def evaluate_pii(detector: Detector, sample: Sequence[AnnotatedText]) -> PiiQuality:
    """Run ``detector`` on ``sample`` (timed) and score it."""
    t0 = time.perf_counter()
    detected = detector.detect([a.text for a in sample])
    return score_texts(detector.name, sample, detected, time.perf_counter() - t0)
