"""Microsoft Presidio as a secret detector (optional; JFT §4 allows any detector).

Presidio's analyzer runs on the same spaCy pipeline as the other detectors, so no model is
downloaded, with all its predefined recognisers: credit cards (Luhn), IBAN (mod 97), US SSN,
IP, URL, e-mail, phone numbers (``phonenumbers``), dates, and spaCy's names and places. Its
e-mail recogniser checks domains with ``tldextract``, which is pinned to its bundled suffix
list here: a detector must not reach the network while it reads private text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from privlm.detect.base import Span, merge_spans
from privlm.detect.spacy_detector import DEFAULT_PIPELINE


@lru_cache(maxsize=2)
def _analyzer(pipeline: str) -> Any:
    from privlm.extras import require

    require("detect", "the presidio detector")
    _offline_tldextract()
    # Presidio warns once per text for each spaCy label it keeps unmapped (CARDINAL, …) and
    # once per recogniser of another language: hundreds of lines that say nothing wrong.
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    provider = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": pipeline}],
        }
    )
    return AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])


def _offline_tldextract() -> None:
    """Make tldextract use its bundled public-suffix snapshot, never a download."""
    import tldextract
    import tldextract.tldextract as module

    module.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


class PresidioDetector:
    """Every entity Presidio's recognizers find with score at least ``threshold``."""

    def __init__(self, threshold: float = 0.35, pipeline: str = DEFAULT_PIPELINE) -> None:
        self.threshold = threshold
        self.pipeline = pipeline
        self.name = "presidio"

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        analyzer = _analyzer(self.pipeline)
        out = []
        for text in texts:
            results = analyzer.analyze(text=text, language="en", score_threshold=self.threshold)
            out.append(merge_spans([Span(r.start, r.end, r.entity_type) for r in results]))
        return out
