"""Organisation spans completed by their legal form (privlm.detect.legal_forms)."""

from __future__ import annotations

import pytest

from privlm.detect.base import Span
from privlm.detect.legal_forms import complete_organisations

pytestmark = pytest.mark.fast


def _completed(text: str, *pieces: str, label: str = "ORGANIZATION") -> list[str]:
    spans = [Span(text.index(p), text.index(p) + len(p), label) for p in pieces]
    return [text[s.start : s.end] for s in complete_organisations(text, spans)]


@pytest.mark.parametrize(
    ("text", "found", "completed"),
    [
        ("He works at Nagy Zrt.. Then", "Nagy Zrt", "Nagy Zrt."),  # the abbreviation's dot
        ("at Mora Šimeková a.s. now", "Mora Šimeková a", "Mora Šimeková a.s."),
        ("at Blaha v.o.s. now", "Blaha v", "Blaha v.o.s."),
        ("at Ďurovičová a.s.", "Ďurovičová", "Ďurovičová a.s."),  # the form after the name
        ("at Vanneste-Hellemans CV, then", "Vanneste-Hellemans", "Vanneste-Hellemans CV"),
        ("at Acme, Inc. in Ohio", "Acme", "Acme, Inc."),
        ("at Kowalski Sp. z o.o. in", "Kowalski", "Kowalski Sp. z o.o."),
        ("at Rossi S.p.A.. and", "Rossi S", "Rossi S.p.A."),
        ("at Acme GmbH & Co. KG today", "Acme", "Acme GmbH & Co. KG"),
    ],
)
def test_an_organisation_takes_the_legal_form_after_it(text, found, completed):
    assert _completed(text, found) == [completed]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("at Acme as well", "Acme"),  # an English word, not "AS"
        ("at Acme. Ann left", "Acme"),  # a sentence's dot, no form before it
        ("at Acme and then", "Acme"),
        ("at Acme Ann Lee", "Acme"),
    ],
)
def test_words_that_are_not_written_as_a_form_leave_the_span_alone(text, found):
    assert _completed(text, found) == [found]


def test_two_organisation_pieces_join_across_one_connector_word():
    text = "at Hens, De Vos en Heylen CV now"
    assert _completed(text, "Hens, De Vos", "Heylen CV") == ["Hens, De Vos en Heylen CV"]
    text = "Ann Lee and Bo Li met"  # persons are not joined
    assert _completed(text, "Ann Lee", "Bo Li", label="PERSON") == ["Ann Lee", "Bo Li"]


def test_other_types_are_not_extended():
    assert _completed("to Ann AB today", "Ann", label="PERSON") == ["Ann"]
    text = "Ann Lee at Acme AB"
    spans = [Span(0, 7, "PERSON"), Span(11, 15, "ORGANIZATION")]
    got = complete_organisations(text, spans)
    assert got == [Span(0, 7, "PERSON"), Span(11, 18, "ORGANIZATION")]
