"""Name spans that cut a word take the whole word (privlm.detect.base.whole_words)."""

from __future__ import annotations

import pytest

from privlm.detect.base import Span, whole_words

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("text", "found", "label", "widened"),
    [
        ("BayerVB sets C$ 100 million", "ayer", "ORGANIZATION", "BayerVB"),
        ("said Venantius on", "antius", "PERSON", "Venantius"),
        ("in Sklabiňa yesterday", "Sklab", "GPE", "Sklabiňa"),
        ("met Ann Lee.", "Ann Lee", "PERSON", "Ann Lee"),  # whole already: unchanged
        ("the AN-NAHAR daily", "NAHAR", "ORGANIZATION", "NAHAR"),  # a hyphen ends a word
    ],
)
def test_a_name_span_that_cuts_a_word_takes_all_of_it(text, found, label, widened):
    start = text.index(found)
    (got,) = whole_words(text, [Span(start, start + len(found), label)])
    assert text[got.start : got.end] == widened and got.label == label


def test_other_types_are_kept_as_found_and_overlaps_merge():
    text = "ref ID12345X and Bo"
    assert whole_words(text, [Span(6, 11, "ID")]) == [Span(6, 11, "ID")]
    text = "BayerVB"
    got = whole_words(text, [Span(1, 4, "ORGANIZATION"), Span(4, 7, "PERSON")])
    assert got == [Span(0, 7, "ORGANIZATION|PERSON")]
