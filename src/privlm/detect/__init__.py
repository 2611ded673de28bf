"""Secret detectors: policy functions that mark the sensitive spans of a text (JFT §2, §4).

A detector maps texts to character spans; everything outside the spans is public under the
policy. ``make_detector("regex+low-entity")`` builds one from a spec; ``evaluate_on_conll``
measures recall and precision; ``miss_rate_interval`` estimates the miss rate JFT's
light-noise mode needs.
"""

from privlm.detect.allow import AllowingDetector
from privlm.detect.base import Detector, Span, merge_spans
from privlm.detect.conll_eval import DetectorQuality, evaluate_on_conll
from privlm.detect.miss_rate import (
    AnnotatedText,
    MissRateInterval,
    load_annotated,
    miss_rate_interval,
)
from privlm.detect.regex_detector import RegexDetector
from privlm.detect.registry import DETECTOR_NAMES, make_detector
from privlm.detect.spacy_detector import SPACY_LEVELS, SpacyDetector

__all__ = [
    "DETECTOR_NAMES",
    "SPACY_LEVELS",
    "AllowingDetector",
    "AnnotatedText",
    "Detector",
    "DetectorQuality",
    "MissRateInterval",
    "RegexDetector",
    "SpacyDetector",
    "Span",
    "evaluate_on_conll",
    "load_annotated",
    "make_detector",
    "merge_spans",
    "miss_rate_interval",
]
