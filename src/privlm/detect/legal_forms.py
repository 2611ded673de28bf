"""An organisation's name ends with its legal form: complete the spans that stop short of it.

A tagger finds "Nagy" or "Nagy Zrt" in "Nagy Zrt." and misses the rest: the abbreviation's
last dot, the pieces of a dotted form ("a" of "a.s."), or a form written after the name
("Novák s.r.o."). Left in the text, the form says what the redaction hid. A name span is
extended over a legal form that follows it, read from a list of the common company forms of
some fifty jurisdictions and the family-firm endings ("e Filhos", "& Söhne"; general
knowledge of company law, in the spirit of ISO 20275's entity legal forms; not drawn from any
test text), and two name pieces with one short connector word between them ("De Vos en
Heylen") become one span when the second ends the organisation's name with its form, when both
are organisations, or when the first is a list of single names that the second ends (a firm
named by its partners: "Waweru, Wasonga and Gichuki").

Most company names are family names, so a tagger often reads the name before the form as a
person or a place ("Junasová" in "Junasová a.s."): a person's, place's or address's span
takes the form after it too, and becomes an ORGANIZATION. A form counts only when it is
written as one: with a capital letter or a dot ("AS", "a.s."), so that English words ("as",
"and") never extend a span; after a span that is not already an organisation, more strictly,
with a dot, two capitals or three letters and a capital ("AB", "Lda", not "As" or "Me").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from privlm.detect.base import NAME_TYPES, Span, merge_spans

ORG = "ORGANIZATION"

# dots, spaces and case removed: "S.p.A." -> "spa", "Sp. z o.o." -> "spzoo"
_FORMS = """
inc incorporated corp corporation co company cos ltd limited llc llp lp lllp plc pc pllc pty
ptyltd nl gmbh ag kg ohg gbr ug ev eg se kgaa gmbhcokg cokg gmbh&cokg ag&cokg &co &cokg &cie
&cia &sons sa sas sasu sarl eurl sca snc scs sc scop scp srl srls spa sapa sccl sl slu sll
slne sad sacv sadecv sab sabdecv srldecv ltda me epp eireli mei lda sgps bv nv vof cv cvba
bvba comm ab hb kb oy oyj ky tmi as asa aps is ks ans da kft zrt nyrt bt kkt kht rt sro vos
commv commva spzoo spj spk ska ood eood ad ead et doo jdoo dd dno kd sia uab ou tu mtu pt tbk ud bhd sdnbhd
berhad pte kk yk gk ltdsti sti şti ltdşti tic san aş anonim ao oao zao ooo pao ip tov pp jsc
ojsc cjsc pvtltd pvt opc lc gp cic cio scic bvi ehf hf sf ses sec pse ltée ltee senc
andsons efilhos &filhos yhijos &hijos efigli &figli etfils &fils undsöhne &söhne enzonen
&zonen ycía &cía ycia ecia etcie &associates &partners yasociados &asociados eassociados
&associados
"""
_CONNECTORS = "and & + et und y e és och og en i a ve и"
LEGAL_FORMS = frozenset(_FORMS.split())
CONNECTORS = frozenset(_CONNECTORS.split())

_DOTTED_TAIL = re.compile(r"(?:\.[^\W\d_]{1,3})*\.")  # ".o.s." after "v", "." after "Zrt"
_LIST_NAME = re.compile(r"[^\W\d_][\w'’-]*")  # one name word: "Kļaviņš", "O'Neil"
_NEXT_WORD = re.compile(r"[ \t]*,?[ \t]+((?:[^\W\d_]|&)[^\s,;:()]*)")


Written = Callable[[str], bool]


def _norm(word: str) -> str:
    return word.replace(".", "").replace(" ", "").lower()


def _written_as_form(word: str) -> bool:
    return "." in word or any(c.isupper() for c in word)


def _written_as_form_after_a_name(word: str) -> bool:
    """Stricter, after a person's or a place's name: a dot, two capitals, or a last word of
    three letters or more with a capital ("AB", "Lda", "e Filhos"; not "As", "Me")."""
    last = word.split()[-1] if " " in word else word.split("&")[-1]
    letters = [c for c in last if c.isalpha()]
    return (
        "." in word
        or sum(c.isupper() for c in word) >= 2
        or (len(letters) >= 3 and letters[0].isupper())
    )


def _tail_end(text: str, span: Span, written: Written = _written_as_form) -> int:
    """Where the span's last word ends once its dotted form is complete ("Zrt" + ".")."""
    words = text[span.start : span.end].split()
    tail = _DOTTED_TAIL.match(text, span.end)
    if not words or tail is None:
        return span.end
    word = words[-1] + tail.group(0)
    if _norm(word) in LEGAL_FORMS and written(word):
        return tail.end()
    return span.end


def _form_after(text: str, end: int, written: Written = _written_as_form) -> int:
    """The end of a legal form of one to four words right after ``end``, else ``end``."""
    best, pos, words = end, end, []
    for _ in range(4):
        m = _NEXT_WORD.match(text, pos)
        if m is None:
            break
        word = re.sub(r"['’]s$", "", m.group(1))  # "v.o.s.'s records": the form, not its 's
        word = re.sub(r"\.{2,}$", ".", word)  # "Zrt.." ends a sentence: one dot is the form's
        words.append(word)
        pos = m.start(1) + len(word)
        if _norm("".join(words)) in LEGAL_FORMS and written(" ".join(words)):
            best = pos
    return best


def _ends_with_form(text: str, span: Span) -> bool:
    """Whether the span is a name followed, inside it, by a legal form ("Verhaegen NV")."""
    words = text[span.start : span.end].split()
    for k in range(1, min(4, len(words) - 1) + 1):
        form = " ".join(words[-k:])
        if _norm(form) in LEGAL_FORMS and _written_as_form_after_a_name(form):
            return True
    return False


def _is_org(span: Span) -> bool:
    return ORG in span.label.split("|")


def _is_name(span: Span) -> bool:
    return not NAME_TYPES.isdisjoint(span.label.split("|"))


def _extend(text: str, span: Span) -> Span:
    """An organisation's span, or a name's, over the legal form after it; a name that takes
    a form is an organisation."""
    if not _is_name(span):
        return span
    written = _written_as_form if _is_org(span) else _written_as_form_after_a_name
    tail = _tail_end(text, span, written)
    end = _form_after(text, tail, written)
    if end > tail:  # a form after the name: its own last dot ("Sp. z o.o" + ".")
        end = _tail_end(text, Span(span.start, end, span.label), written)
    label = span.label if end == span.end or _is_org(span) else ORG
    return Span(span.start, end, label)


def _ends_a_list_of_names(text: str, first: Span, second: Span) -> bool:
    """ "Waweru, Wasonga" + " and " + "Gichuki": a firm named by its partners, a list of
    single names whose last two a connector joins."""
    listed = text[first.start : first.end].split(", ")
    return (
        len(listed) >= 2
        and all(_LIST_NAME.fullmatch(w) and w[0].isupper() for w in listed[1:])
        and _LIST_NAME.fullmatch(last := text[second.start : second.end]) is not None
        and last[0].isupper()
    )


def _one_name(text: str, first: Span, second: Span) -> bool:
    """Two pieces of one organisation's name: one connector word between spaces, both
    names, and either both organisations, the second ending with its legal form, or the
    first a list of single names the second ends ("Waweru, Wasonga and Gichuki")."""
    gap = text[first.end : second.start]
    if gap.strip().lower() not in CONNECTORS or gap != f" {gap.strip()} ":
        return False
    if _is_org(first) and _is_org(second):
        return True
    if not (_is_name(first) and _is_name(second)):
        return False
    return _ends_with_form(text, second) or _ends_a_list_of_names(text, first, second)


def complete_organisations(text: str, spans: Sequence[Span]) -> list[Span]:
    """``spans`` merged, each name span extended over the legal form after it, and two name
    pieces of one organisation joined across the connector word between them."""
    extended = merge_spans([_extend(text, s) for s in spans])
    out: list[Span] = []
    for s in extended:
        if out and _one_name(text, out[-1], s):
            out[-1] = Span(out[-1].start, s.end, ORG)
        else:
            out.append(s)
    return out
