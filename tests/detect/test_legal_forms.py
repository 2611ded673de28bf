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
        ("works for Stojnić j.d.o.o. and", "Stojnić j.d.o.o", "Stojnić j.d.o.o."),
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


@pytest.mark.parametrize(
    ("text", "found", "label", "completed"),
    [
        ("to Junasová a.s. now", "Junasová", "PERSON", "Junasová a.s."),
        ("at Alves Tavares Lda. and", "Alves Tavares Lda", "GPE", "Alves Tavares Lda."),
        ("to Ann AB today", "Ann", "PERSON", "Ann AB"),
        ("at Torfs CommV now", "Torfs", "NRP", "Torfs CommV"),
        ("to Barros e Filhos on", "Barros", "PERSON", "Barros e Filhos"),
        ("per Rakovan v.o.s.'s records", "Rakovan", "PERSON", "Rakovan v.o.s."),
    ],
)
def test_a_name_with_a_legal_form_after_it_is_an_organisation(text, found, label, completed):
    """Company names are mostly family names: a person's or a place's span that a form
    follows takes it, and is an organisation."""
    start = text.index(found)
    (got,) = complete_organisations(text, [Span(start, start + len(found), label)])
    assert (text[got.start : got.end], got.label) == (completed, "ORGANIZATION")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("tell Ann As soon as", "Ann"),  # a capitalised English word, two letters
        ("tell Ann Me too", "Ann"),
        ("Ann and sons left", "Ann"),  # lower case: prose, not a form
        ("Ann et al. wrote", "Ann"),
        ("Ann Lee", "Ann Lee"),
    ],
)
def test_after_a_name_a_form_must_be_written_as_one_more_strictly(text, found):
    start = text.index(found)
    (got,) = complete_organisations(text, [Span(start, start + len(found), "PERSON")])
    assert (text[got.start : got.end], got.label) == (found, "PERSON")


def test_other_types_keep_their_spans_and_labels():
    text = "Ann Lee at Acme AB"
    spans = [Span(0, 7, "PERSON"), Span(11, 15, "ORGANIZATION")]
    got = complete_organisations(text, spans)
    assert got == [Span(0, 7, "PERSON"), Span(11, 18, "ORGANIZATION")]
    assert complete_organisations("id 123 AB", [Span(3, 6, "ID")]) == [Span(3, 6, "ID")]


def test_name_pieces_join_when_the_second_ends_with_its_form():
    text = "for Aerts, Loos en Verhaegen NV now"
    spans = [Span(4, 15, "STREET_ADDRESS"), Span(19, 31, "GPE")]
    (got,) = complete_organisations(text, spans)
    assert (text[got.start : got.end], got.label) == ("Aerts, Loos en Verhaegen NV", "ORGANIZATION")
    text = "Ann Lee and Bo Li met"  # no form: two persons stay two
    assert _completed(text, "Ann Lee", "Bo Li", label="PERSON") == ["Ann Lee", "Bo Li"]


def test_a_firm_named_by_its_partners_is_one_organisation():
    """A list of single names whose last two a connector joins: "Waweru, Wasonga and
    Gichuki"; two names alone (no list) stay two."""
    text = "led by Doreen Akoth of Waweru, Wasonga and Gichuki."
    spans = [Span(7, 19, "PERSON"), Span(23, 38, "PERSON"), Span(43, 50, "PERSON")]
    got = complete_organisations(text, spans)
    assert [(text[g.start : g.end], g.label) for g in got] == [
        ("Doreen Akoth", "PERSON"),
        ("Waweru, Wasonga and Gichuki", "ORGANIZATION"),
    ]
    text = "to Zariņa, Kļaviņš un Skuja"  # not a connector this list knows: left alone
    assert _completed(text, "Zariņa, Kļaviņš", "Skuja", label="PERSON") == [
        "Zariņa, Kļaviņš",
        "Skuja",
    ]
    text = "to Ann, Bo Li and Cy"  # a piece of two words is not a list of single names
    assert _completed(text, "Ann, Bo Li", "Cy", label="PERSON") == ["Ann, Bo Li", "Cy"]
