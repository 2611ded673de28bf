"""Names continued over capitalised words, and acronyms as organisations
(privlm.detect.name_runs)."""

from __future__ import annotations

import pytest

from privlm.detect.base import Span, UnionDetector
from privlm.detect.name_runs import acronym_spans, complete_names, continue_names

pytestmark = pytest.mark.fast


def _continued(text: str, found: str, label: str = "ORGANIZATION") -> list[str]:
    start = text.index(found)
    spans = [Span(start, start + len(found), label)]
    return [text[s.start : s.end] for s in continue_names(text, spans)]


@pytest.mark.parametrize(
    ("text", "found", "continued"),
    [
        ("-- Chicago Newsdesk 312-408-8787", "Chicago", "Chicago Newsdesk"),
        ("through the Hong Kong Central Moneymarkets Unit .", "Hong Kong", "Hong Kong Central Moneymarkets Unit"),
        ("the paper, National Socialist Battle Cry, said", "Battle", "National Socialist Battle Cry"),
        ("Detroit 10 KANSAS CITY 3", "KANSAS", "KANSAS CITY"),
        ("we met Maria José Ortega-Ruiz at noon", "José", "Maria José Ortega-Ruiz"),
        ("a letter to Zeeman Bouwbedrijf about", "Zeeman", "Zeeman Bouwbedrijf"),
    ],
)  # fmt: skip
def test_a_name_runs_on_over_the_capitalised_words_beside_it(text, found, continued):
    assert _continued(text, found) == [continued]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Thanks Maria for the call", "Maria"),  # a greeting
        ("Dear Ms Lopez, thanks", "Lopez"),  # an honorific
        ("Advertising revenues at The Times grew", "Times"),  # an article
        ("seen in Berlin Monday and", "Berlin"),  # a weekday
        ("Contact Lopez today", "Lopez"),  # the first word of the text
        ("It rained. Contact Lopez today", "Lopez"),  # the first word of a sentence
        ("Acme Corp's URL changed", "Acme Corp's"),  # a common acronym
        ("Paris, France", "Paris"),  # a comma is not a space
        ("Ann\nBrown", "Ann"),  # nor a line break
    ],
)
def test_a_name_does_not_take_what_is_not_part_of_it(text, found):
    assert _continued(text, found, "PERSON") == [found]


def test_only_name_spans_are_continued():
    text = "mail ann@example.com Today Acme"
    spans = [Span(5, 20, "EMAIL")]
    assert continue_names(text, spans) == spans


def _acronyms(text: str) -> list[str]:
    return [text[s.start : s.end] for s in acronym_spans(text)]


def test_acronyms_that_may_name_a_body_are_organisations():
    text = "The CNB-120 index rose, the RBA said; CNIEC lent copper and M&R paid."
    assert _acronyms(text) == ["CNB", "RBA", "CNIEC", "M&R"]
    assert {s.label for s in acronym_spans(text)} == {"ORGANIZATION"}


@pytest.mark.parametrize(
    "text",
    [
        "Send the PDF and your ZIP code by 5 PM GMT, ASAP.",  # common acronyms
        "Our CEO paid 40 USD for the VPN; the IBAN is on file.",
        "Henry VIII and Phase II of the plan",  # Roman numerals
        "SOCCER - JAPAN GET LUCKY WIN , CHINA IN SURPRISE DEFEAT .",  # a headline in capitals
        "A word, I think, and U.S. or e.g. stay",  # one capital, or dotted
    ],
)
def test_common_acronyms_numerals_and_texts_in_capitals_are_not(text):
    assert _acronyms(text) == []


def test_complete_names_adds_acronyms_and_continues_them():
    text = "A report by NBH Research Desk on Friday"
    assert [text[s.start : s.end] for s in complete_names(text, [])] == ["NBH Research Desk"]


class _Found:
    """A detector that finds the given pieces."""

    name = "found"

    def __init__(self, *pieces: str, label: str = "GPE") -> None:
        self.pieces, self.label = pieces, label

    def detect(self, texts):
        return [
            [Span(t.index(p), t.index(p) + len(p), self.label) for p in self.pieces if p in t]
            for t in texts
        ]


def test_the_bridging_union_applies_both_rules_and_a_plain_union_neither():
    text = "Hong Kong Central Moneymarkets Unit cleared it with the HKMA"
    found = _Found("Hong Kong")
    bridged = UnionDetector([found], bridge=True).detect([text])[0]
    assert [text[s.start : s.end] for s in bridged] == [
        "Hong Kong Central Moneymarkets Unit",
        "HKMA",
    ]
    plain = UnionDetector([found]).detect([text])[0]
    assert [text[s.start : s.end] for s in plain] == ["Hong Kong"]
