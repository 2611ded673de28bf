"""Secret detectors: the regex kinds, the spaCy levels of JFT §4, unions, deliberate misses."""

from __future__ import annotations

import itertools

import pytest

from privlm.detect import (
    AllowingDetector,
    RegexDetector,
    SpacyDetector,
    Span,
    make_detector,
    merge_spans,
)
from privlm.errors import PrivlmError

pytestmark = pytest.mark.fast

DIVORCE = "Did you hear Alice is getting divorced? She met John Smith in Paris on Monday."


def flagged_words(detector, text: str) -> set[str]:
    spans = detector.detect([text])[0]
    return {text[s.start : s.end] for s in spans}


def covered(detector, text: str) -> set[int]:
    return {i for s in detector.detect([text])[0] for i in range(s.start, s.end)}


def test_merge_spans_joins_overlaps_and_keeps_touching_spans_apart():
    merged = merge_spans([Span(5, 9, "B"), Span(0, 3, "A"), Span(2, 4, "C"), Span(9, 12, "D")])
    assert merged == [Span(0, 4, "A|C"), Span(5, 9, "B"), Span(9, 12, "D")]


def test_a_span_must_be_nonempty():
    with pytest.raises(ValueError):
        Span(3, 3)


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("write to jane.doe+x@example.co.uk today", "jane.doe+x@example.co.uk", "EMAIL"),
        ("call 555-123-4567 now", "555-123-4567", "PHONE"),
        ("call +1 (555) 123-4567 now", "+1 (555) 123-4567", "PHONE"),
        ("my SSN is 123-45-6789.", "123-45-6789", "ID"),
        ("ticket AB12345X was closed", "AB12345X", "ID"),
        ("it cost 1,250.50 dollars", "1,250.50", "NUMBER"),
        ("My ID is 660487", "660487", "NUMBER"),
    ],
)
def test_regex_detector_finds_each_kind(text, secret, kind):
    spans = RegexDetector().detect([text])[0]
    hit = [s for s in spans if text[s.start : s.end] == secret]
    assert hit, f"{secret!r} not flagged in {text!r}: {spans}"
    assert kind in hit[0].label.split("|")


def test_regex_detector_leaves_plain_words_alone():
    assert RegexDetector().detect(["the cat sat on the mat, happily."]) == [[]]


def test_regex_detector_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="unknown regex kinds"):
        RegexDetector(["SSN"])


def test_low_entity_flags_people_places_dates_only():
    words = flagged_words(SpacyDetector("low-entity"), DIVORCE)
    assert {"Alice", "John Smith", "Paris", "Monday"} <= words
    assert "you" not in words and "divorced" not in words


def test_contextual_levels_add_pronouns_subjects_and_then_verbs():
    low = flagged_words(SpacyDetector("low-contextual"), DIVORCE)
    high = flagged_words(SpacyDetector("high-contextual"), DIVORCE)
    assert {"you", "She", "Alice"} <= low
    assert not {"hear", "getting", "met"} & low
    assert {"hear", "getting", "met"} <= high


def test_levels_are_nested():
    texts = [
        DIVORCE,
        "The 3 engineers from Google flew to Berlin at 5 pm to sign the $2 million contract.",
    ]
    for text in texts:
        sets = [covered(SpacyDetector(level), text) for level in
                ("low-entity", "high-entity", "low-contextual", "high-contextual")]  # fmt: skip
        for smaller, larger in itertools.pairwise(sets):
            assert smaller <= larger


@pytest.mark.parametrize("level", ["low-entity", "high-contextual"])
def test_a_spacy_level_answers_each_text_as_it_answers_it_alone(level):
    """Per record, to the bit: ``nlp.pipe`` batches texts, and each text's spans and
    token vectors are those it gets alone (JFT's policy must be a function of the record;
    docs/sharp_edges.md)."""
    import numpy as np

    from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
    from privlm.detect.spacy_detector import load_pipeline

    texts = [a.text for a in family_corpus(48, DEV_FAMILIES, DEV_SOURCES, seed=7)]
    detector = SpacyDetector(level, batch_size=16)
    assert detector.detect(texts) == [detector.detect([t])[0] for t in texts]
    nlp = load_pipeline(detector.pipeline)
    off = detector._disabled(nlp)
    together = list(nlp.pipe(texts, batch_size=16, disable=off))
    for text, doc in zip(texts, together, strict=True):
        assert np.array_equal(next(iter(nlp.pipe([text], disable=off))).tensor, doc.tensor)


def test_high_entity_knows_all_18_types():
    from privlm.detect.spacy_detector import ALL_ENTITY_TYPES, load_pipeline

    assert len(ALL_ENTITY_TYPES) == 18
    assert set(load_pipeline().get_pipe("ner").labels) == ALL_ENTITY_TYPES


def test_union_spec_and_unknown_names():
    d = make_detector("regex+low-entity")
    words = flagged_words(d, "Alice's number is 555-123-4567.")
    assert "Alice" in words and "555-123-4567" in words
    with pytest.raises(PrivlmError, match="unknown detector"):
        make_detector("medium-entity")
    with pytest.raises(PrivlmError, match="unknown spaCy level"):
        SpacyDetector("low")


def test_allowing_detector_deliberately_misses_the_canary():
    inner = make_detector("regex")
    d = AllowingDetector(inner, ["660487"])
    text = "My ID is 660487 and my phone is 555-123-4567"
    assert "660487" in flagged_words(inner, text)
    words = flagged_words(d, text)
    assert "660487" not in words and "555-123-4567" in words


def test_presidio_detector_finds_an_email_and_a_person():
    words = flagged_words(make_detector("presidio"), "Email John Smith at john@example.com.")
    assert "john@example.com" in words
    assert any("John" in w for w in words)
