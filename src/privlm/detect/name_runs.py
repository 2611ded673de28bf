"""Names run on over capitalised words, and acronyms name bodies: two rules after the tagger.

A tagger trained on template text finds part of a multi-word name and stops: "Chicago" of
"Chicago Newsdesk", "Hong Kong Central Moneymarkets" of "... Unit", "Battle" of "National
Socialist Battle Cry". In English (and most Latin-script languages) a proper name is a run
of capitalised words, so a name span takes the capitalised words right beside it
(:func:`continue_names`): one space apart, not a function word, an honorific, a greeting, a
month or a weekday, and on the left not the first word of a sentence, whose capital says
nothing.

Bodies are often written as an acronym with no cue around it ("the CNB said", "RBA",
"CNIEC lent ..."), which a tagger reading template text misses. A word of two to eight
capitals is flagged as an ORGANIZATION (:func:`acronym_spans`) unless it is one of the common
acronyms that name no one (units, currencies, time zones, job titles, form fields such as
"ZIP" and "IBAN", file types) or a Roman numeral, and never in a text written in capitals
(a headline or a shouted line, where every word is one).

Both are general knowledge of how names are written, chosen on development text only
(CoNLL-2003's training split and a check draw of the development families; docs/results.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from privlm.detect.base import NAME_TYPES, Span, merge_spans
from privlm.detect.legal_forms import ORG

_NOT_NAMES = """
a an the in on at of for to from by with and or but nor as is are was were be been this that
these those it its he she they we you i my our your his her their me him them us there here
if then than so not no yes please thanks thank regards dear hi hello hey re fw fwd cc bcc
mr mrs ms miss mx dr prof sir madam mme mlle herr frau sr sra dott ing
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday
"""
NOT_NAMES = frozenset(_NOT_NAMES.split())

_COMMON_ACRONYMS = """
ok id ids pdf doc docx xls xlsx csv txt jpg png gif zip url urls www http https html api
usb vpn wifi gps sms mms atm pin tan otp faq faqs asap fyi tbd tba na nb ps pps rsvp eta etd
diy aka tv dvd cd pc mac os ios ai ml it hr pr qa rnd ip tcp dns ssl tls ssh ftp sim imei
ceo cfo cto coo cio cmo vp svp evp md phd mba bsc msc ba ma rn gp er icu
am pm gmt utc bst cet cest est edt cst cdt mst mdt pst pdt ist aest aedt
usd eur gbp jpy chf aud cad nzd inr cny sek nok dkk pln czk huf brl mxn
kg km cm mm ml kw kwh mph kph
iban bic swift vat gst hst pst ssn sin nhs dob nin tfn abn ein itin po ref tel fax
no nr qty pcs ltd inc llc plc gmbh
"""
COMMON_ACRONYMS = frozenset(_COMMON_ACRONYMS.split())

_NEXT = re.compile(r" ([^\W\d_][\w'’&-]*)(?=[\s,;:.!?)\]]|$)")
_PREV = re.compile(r"(?:^|(?<=[\s(\[]))([^\W\d_][\w'’&-]*) $")
_SENTENCE_END = re.compile(r"(?:^|[.!?\n]\s*|[\"“]\s*)$")
_ACRONYM = re.compile(r"(?<![\w&.-])[A-Z][A-Z&]{1,7}(?![\w&]|\.\w)")
_ROMAN = re.compile(r"^[IVXLCDM]+$")
_WORD = re.compile(r"[^\W\d_]{2,}")
_WINDOW = 64  # characters looked back for a word or a sentence's end: long texts stay linear


def _capitalised(word: str) -> bool:
    if not word[0].isupper() or word.lower() in NOT_NAMES:
        return False
    return not (word.isupper() and word.lower() in COMMON_ACRONYMS)


def _widened(text: str, s: Span) -> Span:
    start, end = s.start, s.end
    while (m := _NEXT.match(text, end)) and _capitalised(m.group(1)):
        end = m.end()
    while (m := _PREV.search(text, max(0, start - _WINDOW), start)) and _capitalised(m.group(1)):
        if _SENTENCE_END.search(text, max(0, m.start(1) - _WINDOW), m.start(1)):
            break  # the first word of a sentence: its capital says nothing
        start = m.start(1)
    return Span(start, end, s.label)


def continue_names(text: str, spans: Sequence[Span]) -> list[Span]:
    """Merged spans, each name span widened over the capitalised words beside it (module
    docstring); other types (an e-mail, an ID) are kept as found."""
    out = [_widened(text, s) if not NAME_TYPES.isdisjoint(s.label.split("|")) else s for s in spans]
    return merge_spans(out)


def written_in_capitals(text: str) -> bool:
    """Whether at least half the words of two letters or more are all capitals."""
    words = _WORD.findall(text)
    return bool(words) and 2 * sum(w.isupper() for w in words) >= len(words)


def acronym_spans(text: str) -> list[Span]:
    """Acronyms that may name a body, as ORGANIZATION spans (module docstring)."""
    if written_in_capitals(text):
        return []
    return [
        Span(m.start(), m.end(), ORG)
        for m in _ACRONYM.finditer(text)
        if m.group().lower() not in COMMON_ACRONYMS
        and not _ROMAN.match(m.group())
        and sum(c.isupper() for c in m.group()) >= 2
    ]


def complete_names(text: str, spans: Sequence[Span]) -> list[Span]:
    """Both rules: acronyms added, then every name span continued."""
    return continue_names(text, [*spans, *acronym_spans(text)])
