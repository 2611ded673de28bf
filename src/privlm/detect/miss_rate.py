"""The detector's miss rate, estimated from a small annotated sample (JFT §3.1, light noise).

m = missed sensitive tokens / all tokens: the chance that a sampled token is a secret the
detector let through. The paper samples the data ``k`` times (10), measures m on each
sample, and takes the 95 % t-interval [m̃_lo, m̃_hi] of the mean. The light-noise phase is
then calibrated at sampling rate q·m̃_hi, and ε is reported at both ends.

Tokens here are words and punctuation marks (``\\w+|[^\\w\\s]``), so the estimate does not
depend on a model's tokenizer.

Annotated files are JSON lines: ``{"text": ..., "sensitive": [[start, end], ...]}`` with
character offsets, or ``{"text": ..., "secrets": ["substring", ...]}``.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from privlm.data.corpora import NerSentence
from privlm.detect.base import Detector, Span
from privlm.detect.conll_eval import sentence_text
from privlm.errors import DataError, PrivlmError

WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class AnnotatedText:
    """A text with its true sensitive spans."""

    text: str
    sensitive: tuple[Span, ...]


@dataclass(frozen=True)
class MissRateInterval:
    mean: float
    low: float  # m̃_lo, clamped at 0
    high: float  # m̃_hi: light noise is calibrated here
    groups: int
    per_group: tuple[float, ...]
    sensitive_tokens: int
    missed_tokens: int
    tokens: int
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_annotated(path: str | Path) -> list[AnnotatedText]:
    """Read an annotated sample (format in the module docstring); errors name file:line."""
    p = Path(path)
    if not p.is_file():
        raise DataError(p, "no such annotated file")
    out: list[AnnotatedText] = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(p, f"not JSON: {e.msg}", i) from e
        text = row.get("text") if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise DataError(p, 'each line needs a "text" string', i)
        spans: list[Span] = []
        for s in row.get("sensitive", []):
            if not (isinstance(s, list) and len(s) == 2 and 0 <= s[0] < s[1] <= len(text)):
                raise DataError(
                    p, f"bad sensitive span {s!r}: need [start, end] inside the text", i
                )
            spans.append(Span(int(s[0]), int(s[1]), "GOLD"))
        for secret in row.get("secrets", []):
            j = text.find(secret) if isinstance(secret, str) and secret else -1
            if j < 0:
                raise DataError(p, f"secret {secret!r} does not occur in the text", i)
            while j >= 0:
                spans.append(Span(j, j + len(secret), "GOLD"))
                j = text.find(secret, j + 1)
        out.append(AnnotatedText(text, tuple(sorted(spans))))
    if not out:
        raise DataError(p, "the annotated file has no records")
    return out


def annotated_from_conll(sentences: Sequence[NerSentence]) -> list[AnnotatedText]:
    """CoNLL-2003 sentences with their entity tokens as the sensitive spans."""
    out = []
    for s in sentences:
        text, offsets = sentence_text(s.tokens)
        spans = tuple(Span(b, e, t) for (b, e), t in zip(offsets, s.tags, strict=True) if t != "O")
        out.append(AnnotatedText(text, spans))
    return out


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
