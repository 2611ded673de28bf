"""An organisation's name ends with its legal form: complete the spans that stop short of it.

A tagger finds "Nagy" or "Nagy Zrt" in "Nagy Zrt." and misses the rest: the abbreviation's
last dot, the pieces of a dotted form ("a" of "a.s."), or a form written after the name
("Novák s.r.o."). Left in the text, the form says what the redaction hid. Each ORGANIZATION
span is extended over a legal form that follows it, read from a list of the common company
forms of some fifty jurisdictions (general knowledge of company law, in the spirit of ISO
20275's entity legal forms; not drawn from any test text), and two organisation pieces with
one short connector word between them ("De Vos en Heylen") become one span.

A form counts only when it is written as one: with a capital letter or a dot ("AS", "a.s."),
so that English words ("as", "and") never extend a span.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from privlm.detect.base import Span, merge_spans

ORG = "ORGANIZATION"

# dots, spaces and case removed: "S.p.A." -> "spa", "Sp. z o.o." -> "spzoo"
_FORMS = """
inc incorporated corp corporation co company cos ltd limited llc llp lp lllp plc pc pllc pty
ptyltd nl gmbh ag kg ohg gbr ug ev eg se kgaa gmbhcokg cokg gmbh&cokg ag&cokg &co &cokg &cie
&cia &sons sa sas sasu sarl eurl sca snc scs sc scop scp srl srls spa sapa sccl sl slu sll
slne sad sacv sadecv sab sabdecv srldecv ltda me epp eireli mei lda sgps bv nv vof cv cvba
bvba comm ab hb kb oy oyj ky tmi as asa aps is ks ans da kft zrt nyrt bt kkt kht rt sro vos
spzoo spj spk ska ood eood ad ead et doo dd dno kd sia uab ou tu mtu pt tbk ud bhd sdnbhd
berhad pte kk yk gk ltdsti sti şti ltdşti tic san aş anonim ao oao zao ooo pao ip tov pp jsc
ojsc cjsc pvtltd pvt opc lc gp cic cio scic bvi ehf hf sf ses sec pse ltée ltee senc
"""
_CONNECTORS = "and & + et und y e és och og en i a ve и"
LEGAL_FORMS = frozenset(_FORMS.split())
CONNECTORS = frozenset(_CONNECTORS.split())

_DOTTED_TAIL = re.compile(r"(?:\.[^\W\d_]{1,3})*\.")  # ".o.s." after "v", "." after "Zrt"
_NEXT_WORD = re.compile(r"[ \t]*,?[ \t]+((?:[^\W\d_]|&)[^\s,;:()]*)")


def _norm(word: str) -> str:
    return word.replace(".", "").replace(" ", "").lower()


def _written_as_form(word: str) -> bool:
    return "." in word or any(c.isupper() for c in word)


def _tail_end(text: str, span: Span) -> int:
    """Where the span's last word ends once its dotted form is complete ("Zrt" + ".")."""
    words = text[span.start : span.end].split()
    tail = _DOTTED_TAIL.match(text, span.end)
    if not words or tail is None:
        return span.end
    word = words[-1] + tail.group(0)
    if _norm(word) in LEGAL_FORMS and _written_as_form(word):
        return tail.end()
    return span.end


def _form_after(text: str, end: int) -> int:
    """The end of a legal form of one to four words right after ``end``, else ``end``."""
    best, pos, joined = end, end, ""
    for _ in range(4):
        m = _NEXT_WORD.match(text, pos)
        if m is None:
            break
        word = re.sub(r"\.{2,}$", ".", m.group(1))  # "Zrt.." ends a sentence: one dot is the form's
        joined += word
        pos = m.start(1) + len(word)
        if _norm(joined) in LEGAL_FORMS and _written_as_form(joined):
            best = pos
    return best


def _extend(text: str, span: Span) -> Span:
    tail = _tail_end(text, span)
    end = _form_after(text, tail)
    if end > tail:  # a form after the name: its own last dot ("Sp. z o.o" + ".")
        end = _tail_end(text, Span(span.start, end, span.label))
    return Span(span.start, end, span.label)


def _is_org(span: Span) -> bool:
    return ORG in span.label.split("|")


def complete_organisations(text: str, spans: Sequence[Span]) -> list[Span]:
    """``spans`` merged, each ORGANIZATION span extended over the legal form after it, and
    two organisation spans joined across one connector word between spaces."""
    extended = merge_spans([_extend(text, s) if _is_org(s) else s for s in spans])
    out: list[Span] = []
    for s in extended:
        gap = text[out[-1].end : s.start] if out else ""
        joined = bool(out) and _is_org(out[-1]) and _is_org(s)
        if joined and gap.strip().lower() in CONNECTORS and gap == f" {gap.strip()} ":
            out[-1] = Span(out[-1].start, s.end, out[-1].label)
        else:
            out.append(s)
    return out
