"""The canonical form of a text, for recognising a record in another encoding.

Two uploads of one body of records must draw on one budget (docs/sharp_edges.md, "What
the record index recognises"). Byte equality misses copies that differ only in encoding, so
the record index compares texts after this normalisation:

1. HTML character references decoded (``&amp;`` → ``&``, at most three rounds: double
   escaping is common);
2. Unicode NFKC (composed characters, full-width forms, ligatures);
3. format characters removed (zero-width spaces and joiners, soft hyphens, bidi marks, BOM);
4. curly and angled quotes made straight, Unicode dashes made ``-``;
5. case folded (``str.casefold``, then NFKC again: folding can decompose);
6. runs of whitespace made one space, and non-word characters at both ends removed (a
   dropped or added final full stop, quotes around the text).

A text that is nothing but punctuation keeps its folded form (so it is still a record).
"""

from __future__ import annotations

import html
import re
import unicodedata

# Unicode format characters (category Cf) that occur in text: invisible, so a copy with one
# inserted looks identical
FORMAT_CHARS = (
    "\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d"
    "\u206e\u206f\ufeff\ufff9\ufffa\ufffb"
)
_DROP = dict.fromkeys(map(ord, FORMAT_CHARS))
_QUOTES_AND_DASHES = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2039\u203a\u0060\u00b4", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    }
)
_ENDS = re.compile(r"^[\W_]+|[\W_]+$")
HTML_ROUNDS = 3


def _unescaped(text: str) -> str:
    for _ in range(HTML_ROUNDS):
        if "&" not in text:
            break
        plain = html.unescape(text)
        if plain == text:
            break
        text = plain
    return text


def canonical_text(text: str) -> str:
    """``text`` in the record index's canonical form (the steps in the module docstring)."""
    s = unicodedata.normalize("NFKC", _unescaped(text))
    s = s.translate(_DROP).translate(_QUOTES_AND_DASHES)
    s = " ".join(unicodedata.normalize("NFKC", s.casefold()).split())
    return _ENDS.sub("", s) or s
