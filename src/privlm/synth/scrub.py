"""PII scrubbed from the records before any generator sees them (``--scrub pii``).

A secret detector (JFT's policy function, :mod:`privlm.detect`) marks the sensitive spans of
each record, and each span is replaced by its type in brackets (``[EMAIL]``, ``[PERSON]``).
The map is applied to each record on its own, so a dataset and its neighbour (one unit's
records added or removed) are mapped to a dataset and its neighbour under the same
relation: the generator's guarantee holds unchanged and ε is not changed (post-processing
runs the other way, but a per-record pre-map keeps neighbours neighbours). It is a
heuristic: what the detector misses reaches the generator, and is protected by ε alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from privlm.data import Dataset
    from privlm.detect.base import Span

NO_SCRUB = "none"
PLACEHOLDER = "[{label}]"


def check_scrub(spec: str) -> str:
    """``spec`` ("none" or a detector spec such as "pii"), or a PrivlmError naming the
    unknown detector; builds nothing, so a service can check it when a job is submitted."""
    if spec != NO_SCRUB:
        from privlm.detect.registry import detector_parts

        detector_parts(spec)
    return spec


def _placeholder(label: str) -> str:
    first = label.split("|", 1)[0].strip()
    return PLACEHOLDER.format(label=first.upper() or "PII")


def scrub_text(text: str, spans: Sequence[Span]) -> str:
    """``text`` with each detected span replaced by its bracketed type."""
    from privlm.detect.base import merge_spans

    out, at = [], 0
    for s in merge_spans(spans):
        out += [text[at : s.start], _placeholder(s.label)]
        at = s.end
    return "".join([*out, text[at:]])


def scrubbed(data: Dataset, spec: str) -> Dataset:
    """``data`` with every record's text scrubbed by the detector ``spec`` (the same
    records, units and labels; ``spec == "none"`` returns ``data`` itself)."""
    if check_scrub(spec) == NO_SCRUB:
        return data
    from privlm.detect import make_detector

    detector = make_detector(spec)
    # one record per call: a batched detector (the tagger pads a batch to its longest text)
    # could let one record's neighbours move another's spans, and the map must be per record
    records = [replace(r, text=scrub_text(r.text, detector.detect([r.text])[0])) for r in data]
    return replace(data, records=records)


def statement_field(spec: str) -> dict[str, str]:
    """The statement's line on the pre-step, where one ran."""
    if spec == NO_SCRUB:
        return {}
    return {
        "scrub": f"{spec}: a secret detector replaced the spans it found in each record by "
        "their type before any generator saw the records; a heuristic pre-step applied to "
        "each record on its own, so one unit still changes only its own records and ε is "
        "unchanged; what the detector misses is protected by ε alone"
    }
