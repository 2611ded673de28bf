"""Detectors by name: ``regex``, the four spaCy levels, ``presidio``, ``pii-patterns``
(privlm's recognisers), ``tagger`` (the learned name, address and place tagger on the public
model's features), ``pii`` (all of them, for recall: JFT's default) and ``pii-fast`` (``pii``
without the tagger: no language model, several times faster); ``a+b`` is a union."""

from __future__ import annotations

from pathlib import Path

from privlm.detect.base import Detector, UnionDetector
from privlm.detect.pii_patterns import PiiPatternDetector
from privlm.detect.presidio_detector import PresidioDetector
from privlm.detect.regex_detector import RegexDetector
from privlm.detect.rules import RulesDetector, load_rules
from privlm.detect.spacy_detector import DEFAULT_PIPELINE, SPACY_LEVELS, SpacyDetector
from privlm.errors import PrivlmError

DETECTOR_NAMES = ("pii", "pii-fast", "regex", *SPACY_LEVELS, "presidio", "pii-patterns", "tagger")
DEFAULT_DETECTOR = "pii"
COMPOSITES = {
    "pii": "regex+pii-patterns+presidio+tagger",
    "pii-fast": "regex+pii-patterns+presidio",
}


def make_detector(
    spec: str, pipeline: str = DEFAULT_PIPELINE, patterns: str | Path | None = None
) -> Detector:
    """``"pii"``, ``"low-entity"``, ``"regex+high-contextual"``, …; with ``patterns``, a
    rules file (:mod:`privlm.detect.rules`) adds the user's own patterns and allow-list."""
    detector = _from_spec(spec, pipeline)
    if patterns is None:
        return detector
    return RulesDetector(detector, load_rules(patterns), Path(patterns).name)


def detector_parts(spec: str) -> list[str]:
    """The detectors a spec names (composites expanded), or a PrivlmError naming the first
    unknown one; builds nothing, so a service can check a spec when a job is submitted."""
    parts = [q for p in spec.split("+") for q in COMPOSITES.get(p.strip(), p.strip()).split("+")]
    parts = [p for p in parts if p]
    if not parts:
        raise PrivlmError(f"empty detector spec; choose from {list(DETECTOR_NAMES)}")
    for p in parts:
        if p not in DETECTOR_NAMES:
            raise PrivlmError(f"unknown detector {p!r}; choose from {list(DETECTOR_NAMES)}")
    return parts


def _from_spec(spec: str, pipeline: str) -> Detector:
    parts = detector_parts(spec)
    built: list[Detector] = []
    for p in parts:
        if p == "regex":
            built.append(RegexDetector())
        elif p in SPACY_LEVELS:
            built.append(SpacyDetector(p, pipeline))
        elif p == "presidio":
            built.append(PresidioDetector(pipeline=pipeline))
        elif p == "tagger":
            from privlm.detect.tagger import TaggerDetector

            built.append(TaggerDetector())
        else:  # detector_parts allows nothing else
            built.append(PiiPatternDetector())
    if len(built) == 1:
        return built[0]
    union = UnionDetector(built, bridge="tagger" in parts)
    union.name = spec.strip()  # "pii", not its parts
    return union
