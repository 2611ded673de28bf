"""Detectors by name: ``regex``, the four spaCy levels, ``presidio``; ``a+b`` is a union."""

from __future__ import annotations

from privlm.detect.base import Detector, UnionDetector
from privlm.detect.presidio_detector import PresidioDetector
from privlm.detect.regex_detector import RegexDetector
from privlm.detect.spacy_detector import DEFAULT_PIPELINE, SPACY_LEVELS, SpacyDetector
from privlm.errors import PrivlmError

DETECTOR_NAMES = ("regex", *SPACY_LEVELS, "presidio")


def make_detector(spec: str, pipeline: str = DEFAULT_PIPELINE) -> Detector:
    """``"low-entity"``, ``"regex+high-contextual"``, …"""
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    if not parts:
        raise PrivlmError(f"empty detector spec; choose from {list(DETECTOR_NAMES)}")
    built: list[Detector] = []
    for p in parts:
        if p == "regex":
            built.append(RegexDetector())
        elif p in SPACY_LEVELS:
            built.append(SpacyDetector(p, pipeline))
        elif p == "presidio":
            built.append(PresidioDetector(pipeline=pipeline))
        else:
            raise PrivlmError(f"unknown detector {p!r}; choose from {list(DETECTOR_NAMES)}")
    return built[0] if len(built) == 1 else UnionDetector(built)
