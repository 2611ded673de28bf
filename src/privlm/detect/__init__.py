"""Secret detectors: policy functions that mark the sensitive spans of a text (JFT §2, §4).

A detector maps texts to character spans; everything outside the spans is public under the
policy. ``make_detector("pii", patterns=FILE)`` builds one from a spec (``pii``, JFT's
default, is regex + privlm's recognisers + Presidio + the learned tagger of
:mod:`privlm.detect.tagger`; ``pii-fast`` leaves the tagger out); ``evaluate_pii`` measures per-type
recall, precision and over-redaction on annotated text (``pii_corpus`` builds privlm's own,
``annotated_from_conll`` converts CoNLL-2003); ``miss_rate_interval`` estimates the miss
rate JFT's light-noise mode needs.
"""

from privlm.detect.allow import AllowingDetector
from privlm.detect.annotated import annotated_from_conll
from privlm.detect.base import Detector, Span, merge_spans
from privlm.detect.conll_eval import DetectorQuality, evaluate_on_conll
from privlm.detect.miss_rate import (
    AnnotatedText,
    MissRateInterval,
    load_annotated,
    miss_rate_interval,
)
from privlm.detect.pii_corpus import pii_corpus, write_corpus
from privlm.detect.pii_quality import PiiQuality, evaluate_pii
from privlm.detect.regex_detector import RegexDetector
from privlm.detect.registry import DEFAULT_DETECTOR, DETECTOR_NAMES, make_detector
from privlm.detect.rules import RulesDetector, load_rules
from privlm.detect.spacy_detector import SPACY_LEVELS, SpacyDetector

__all__ = [
    "DEFAULT_DETECTOR",
    "DETECTOR_NAMES",
    "SPACY_LEVELS",
    "AllowingDetector",
    "AnnotatedText",
    "Detector",
    "DetectorQuality",
    "MissRateInterval",
    "PiiQuality",
    "RegexDetector",
    "RulesDetector",
    "SpacyDetector",
    "Span",
    "annotated_from_conll",
    "evaluate_on_conll",
    "evaluate_pii",
    "load_annotated",
    "load_rules",
    "make_detector",
    "merge_spans",
    "miss_rate_interval",
    "pii_corpus",
    "write_corpus",
]
