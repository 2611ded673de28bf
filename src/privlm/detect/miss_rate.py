"""The detector's miss rate, estimated from a small annotated sample (JFT §3.1, light noise).

m = missed sensitive tokens / all tokens: the chance that a sampled token is a secret the
detector let through. The paper samples the data ``k`` times (10), measures m on each
sample, and takes the 95 % t-interval [m̃_lo, m̃_hi] of the mean. The light-noise phase is
then calibrated at sampling rate q·m̃_hi, and ε is reported at both ends.

Tokens here are words and punctuation marks (``\\w+|[^\\w\\s]``), so the estimate does not
depend on a model's tokenizer.

Annotated files are read by :mod:`privlm.detect.annotated` (typed spans, untyped
``sensitive`` spans, or ``secrets``).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from privlm.detect.annotated import AnnotatedText, annotated_from_conll, load_annotated
from privlm.detect.base import Detector, Span
from privlm.errors import PrivlmError

__all__ = [
    "AnnotatedText",
    "MissRateInterval",
    "annotated_from_conll",
    "count_missed",
    "load_annotated",
    "miss_rate_interval",
]

WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class MissRateInterval:
    """Two rates. ``mean``/``low``/``high`` are per token, JFT's m = missed
    sensitive tokens / all tokens: the chance that a sampled token is a secret the detector
    let through, the subsampling ratio of JFT §3.1's amplification argument, so it is what
    light noise is calibrated at (q·m̃_hi). ``sensitive_miss_rate`` = missed / sensitive
    tokens (1 − token recall) says how good the detector is, independent of how much of the
    text is sensitive; it is reported beside the other, never used for accounting."""

    mean: float
    low: float  # m̃_lo, clamped at 0
    high: float  # m̃_hi: light noise is calibrated here
    groups: int
    per_group: tuple[float, ...]
    sensitive_tokens: int
    missed_tokens: int
    tokens: int
    confidence: float = 0.95

    @property
    def sensitive_miss_rate(self) -> float:
        return self.missed_tokens / max(1, self.sensitive_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sensitive_miss_rate": self.sensitive_miss_rate}


def _overlaps(b: int, e: int, spans: Sequence[Span]) -> bool:
    return any(s.start < e and b < s.end for s in spans)


def count_missed(sample: AnnotatedText, detected: Sequence[Span]) -> tuple[int, int, int]:
    """(tokens, sensitive tokens, sensitive tokens the detector missed)."""
    tokens = sensitive = missed = 0
    for m in WORD.finditer(sample.text):
        tokens += 1
        if _overlaps(m.start(), m.end(), sample.sensitive):
            sensitive += 1
            missed += not _overlaps(m.start(), m.end(), detected)
    return tokens, sensitive, missed


def t_quantile(confidence: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, dof))


def miss_rate_interval(
    detector: Detector,
    sample: Sequence[AnnotatedText],
    groups: int = 10,
    confidence: float = 0.95,
    seed: int = 0,
) -> MissRateInterval:
    """The ``confidence`` t-interval of the miss rate over ``groups`` random disjoint groups."""
    if groups < 2:
        raise PrivlmError("a t-interval needs at least 2 groups")
    if len(sample) < groups:
        raise PrivlmError(
            f"the annotated sample has {len(sample)} record(s); at least {groups} are needed "
            f"to form {groups} groups"
        )
    detected = detector.detect([a.text for a in sample])
    counts = [count_missed(a, d) for a, d in zip(sample, detected, strict=True)]
    order = list(range(len(sample)))
    random.Random(seed).shuffle(order)
    rates = []
    for g in range(groups):
        idx = order[g::groups]
        tok = sum(counts[i][0] for i in idx)
        rates.append(sum(counts[i][2] for i in idx) / tok if tok else 0.0)
    mean = sum(rates) / groups
    sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (groups - 1))
    half = t_quantile(confidence, groups - 1) * sd / math.sqrt(groups)
    return MissRateInterval(
        mean=mean,
        low=max(0.0, mean - half),
        high=min(1.0, mean + half),
        groups=groups,
        per_group=tuple(rates),
        sensitive_tokens=sum(c[1] for c in counts),
        missed_tokens=sum(c[2] for c in counts),
        tokens=sum(c[0] for c in counts),
        confidence=confidence,
    )
