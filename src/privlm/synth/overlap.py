"""How close synthetic texts come to the private records they were made from: exact word
runs, word n-grams and near copies.

These are the measures a data owner checks before sharing synthetic text (NeMo Safe
Synthesizer's replay checks; Carlini et al. 2021, "Extracting Training Data from Large
Language Models", on verbatim runs): they are computed on the private records, so they are
the curator's, never part of a release (:mod:`privlm.synth.report`).

- **Longest common word run**: the most consecutive words a text shares with one record,
  exactly, over the canonical form of both (:mod:`privlm.data.canonical`: case, quotes,
  dashes and spacing do not hide a copy). A suffix automaton of the records (Blumer et al.
  1985) answers it for each text in time linear in the text; a unique separator after each
  record keeps a run inside one record.
- **n-gram overlap**: the share of a text's word :data:`NGRAM`-grams that occur in some
  record.
- **Near copies**: records whose character 5-grams the text mostly contains, or that mostly
  contain it (MinHash containment at :data:`privlm.data.sketch.NEAR_CONTAINMENT`, the
  record index's own rule), and exact copies (equal canonical forms).
"""

from __future__ import annotations

import bisect
import re
import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from privlm.data.canonical import canonical_text
from privlm.data.sketch import NEAR_CONTAINMENT, Sketcher, containment

NGRAM = 5  # the n of the n-gram overlap, in words
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The words of ``text``'s canonical form."""
    return _words_of_canonical(canonical_text(text))


def _words_of_canonical(canonical: str) -> list[str]:
    words_found: list[str] = WORD.findall(canonical)
    return words_found


class SuffixAutomaton:
    """The suffix automaton of a sequence of symbols (Blumer et al. 1985): every substring
    of the sequence is a path from the start, so the longest substring of it that a query
    shares is found in one pass over the query."""

    def __init__(self) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        self.first_end = [-1]  # where the state's strings first end in the sequence
        self.last = 0

    def _state(self, length: int, link: int, first_end: int, edges: dict[int, int]) -> int:
        self.next.append(edges)
        self.link.append(link)
        self.length.append(length)
        self.first_end.append(first_end)
        return len(self.next) - 1

    def extend(self, symbol: int, position: int) -> None:
        """Append ``symbol`` (at ``position`` of the sequence)."""
        cur = self._state(self.length[self.last] + 1, 0, position, {})
        p = self.last
        while p != -1 and symbol not in self.next[p]:
            self.next[p][symbol] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][symbol]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._state(
                    self.length[p] + 1, self.link[q], self.first_end[q], dict(self.next[q])
                )
                while p != -1 and self.next[p].get(symbol) == q:
                    self.next[p][symbol] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def longest_match(self, query: Sequence[int]) -> tuple[int, int]:
        """(the length of the longest substring of ``query`` in the sequence, the position
        where one occurrence of it ends; -1 when nothing matches)."""
        state, length, best, end = 0, 0, 0, -1
        for symbol in query:
            while state and symbol not in self.next[state]:
                state = self.link[state]
                length = self.length[state]
            if symbol in self.next[state]:
                state = self.next[state][symbol]
                length += 1
            if length > best:
                best, end = length, self.first_end[state]
        return best, end


@dataclass(frozen=True)
class TextOverlap:
    """One synthetic text against the records (record positions index ``records``)."""

    longest_run: int  # words
    run_record: int | None  # a record holding that run
    ngram_overlap: float | None  # None: fewer than NGRAM words
    exact_copy_of: int | None
    near_copies_of: tuple[int, ...]


class RecordOverlap:
    """The records, indexed once; :meth:`of` measures a text against them."""

    def __init__(self, records: Sequence[str]) -> None:
        self.vocabulary: dict[str, int] = {}
        self.automaton = SuffixAutomaton()
        self.ends: list[int] = []  # the position of each record's separator
        self.ngrams: set[tuple[int, ...]] = set()
        position = 0
        self.canonical_texts = [canonical_text(t) for t in records]
        for i, canon in enumerate(self.canonical_texts):
            ids = self._ids(_words_of_canonical(canon), grow=True)
            for symbol in ids:
                self.automaton.extend(symbol, position)
                position += 1
            self.automaton.extend(-(i + 1), position)  # unique: no run crosses two records
            self.ends.append(position)
            position += 1
            self.ngrams.update(tuple(ids[j : j + NGRAM]) for j in range(len(ids) - NGRAM + 1))
        self.canonical = {c: i for i, c in reversed(list(enumerate(self.canonical_texts)))}
        self.sketcher = Sketcher(secrets.token_bytes(16))
        self.sketches = [self.sketcher.sketch(c) for c in self.canonical_texts]
        self.bands: dict[str, list[int]] = defaultdict(list)
        for i, sketch in enumerate(self.sketches):
            for key in self.sketcher.band_keys(sketch) if sketch is not None else ():
                self.bands[key].append(i)

    def _ids(self, tokens: list[str], grow: bool = False) -> list[int]:
        if grow:
            return [self.vocabulary.setdefault(w, len(self.vocabulary)) for w in tokens]
        return [self.vocabulary.get(w, -(10**12)) for w in tokens]  # unknown: matches nothing

    def of(self, text: str) -> TextOverlap:
        canon = canonical_text(text)
        ids = self._ids(_words_of_canonical(canon))
        run, end = self.automaton.longest_match(ids)
        grams = [tuple(ids[j : j + NGRAM]) for j in range(len(ids) - NGRAM + 1)]
        shared = sum(g in self.ngrams for g in grams) / len(grams) if grams else None
        return TextOverlap(
            run, bisect.bisect_left(self.ends, end) if run else None, shared,
            self.canonical.get(canon), self._near(canon),
        )  # fmt: skip

    def _near(self, canon: str) -> tuple[int, ...]:
        """The records a text (its canonical form) nearly copies, or that nearly copy it."""
        sketch = self.sketcher.sketch(canon)
        if sketch is None:
            return ()
        candidates = {i for key in self.sketcher.band_keys(sketch) for i in self.bands[key]}
        near = []
        for i in sorted(candidates):
            other = self.sketches[i]
            if other is not None and containment(sketch, other) >= NEAR_CONTAINMENT:
                near.append(i)
        return tuple(near)
