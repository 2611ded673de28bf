"""The curator's overlap report (privlm.synth.overlap, privlm.synth.report) against direct
computations: the longest shared word run by brute force over every pair of positions, the
n-gram overlap by counting, near copies by the record index's own rule."""

from __future__ import annotations

import random

import pytest

from privlm.data import Record
from privlm.detect import RegexDetector
from privlm.synth.overlap import NGRAM, RecordOverlap, SuffixAutomaton, words
from privlm.synth.report import overlap_report

pytestmark = pytest.mark.fast


def brute_run(text: list[str], record: list[str]) -> int:
    best = 0
    for i in range(len(text)):
        for j in range(len(record)):
            k = 0
            while i + k < len(text) and j + k < len(record) and text[i + k] == record[j + k]:
                k += 1
            best = max(best, k)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_the_longest_run_is_the_brute_force_one_and_stays_inside_one_record(seed):
    rng = random.Random(seed)
    vocab = ["a", "b", "c", "d"][: rng.randint(2, 4)]
    records = [" ".join(rng.choices(vocab, k=rng.randint(0, 12))) for _ in range(rng.randint(1, 6))]
    index = RecordOverlap(records)
    for _ in range(10):
        text = " ".join(rng.choices([*vocab, "z"], k=rng.randint(0, 15)))
        got = index.of(text)
        want = max(brute_run(words(text), words(r)) for r in records)
        assert got.longest_run == want
        if want:  # the record it names holds a run that long
            assert brute_run(words(text), words(records[got.run_record])) == want
        grams = [tuple(words(text)[j : j + NGRAM]) for j in range(len(words(text)) - NGRAM + 1)]
        held = {tuple(words(r)[j : j + NGRAM]) for r in records
                for j in range(len(words(r)) - NGRAM + 1)}  # fmt: skip
        want_share = sum(g in held for g in grams) / len(grams) if grams else None
        assert (
            got.ngram_overlap == pytest.approx(want_share) if grams else got.ngram_overlap is None
        )


def test_a_run_across_two_records_is_not_a_run():
    index = RecordOverlap(["one two three", "four five six"])
    assert index.of("two three four five").longest_run == 2


def test_the_automaton_matches_a_known_string():
    sa = SuffixAutomaton()
    for i, s in enumerate([1, 2, 1, 2, 3]):
        sa.extend(s, i)
    assert sa.longest_match([9, 2, 1, 2, 3, 9]) == (4, 4)
    assert sa.longest_match([9, 9]) == (0, -1)


def test_copies_are_found_through_case_spacing_and_one_changed_letter():
    records = [
        "My card ending 4242 was charged twice for the March invoice, please refund it.",
        "The delivery arrived broken and nobody answers the phone at the depot.",
    ]
    index = RecordOverlap(records)
    exact = index.of(
        "  MY CARD ending 4242 was charged twice for the march invoice, please refund it"
    )
    assert exact.exact_copy_of == 0 and exact.near_copies_of == (0,)
    near = index.of(
        "My card ending 4242 was charged twice for the March invoice, please refund me."
    )
    assert near.exact_copy_of is None and near.near_copies_of == (0,)
    far = index.of("I would like to change the colour of my order before it ships.")
    assert far.exact_copy_of is None and far.near_copies_of == () and far.longest_run <= 2


def test_the_report_names_records_by_line_and_flags_pii_that_the_records_hold():
    records = [
        Record("write to anna.berg@example.com about the refund", "u1", line=3),
        Record("the parcel never came", "u2", line=7),
        Record("our canary is zebra-4417-quartz", "u3", line=9),
    ]
    texts = [
        "please write to anna.berg@example.com today",  # a PII echo
        "mail bob.stone@example.org for help",  # PII, in no record
        "the parcel never came and I am upset",  # a 4-word run from line 7
        "zebra-4417-quartz",
    ]
    report = overlap_report(texts, records, RegexDetector(), canaries=["zebra-4417-quartz"])
    rows = report["per_text"]
    assert [e["text"] for e in rows[0]["pii_also_in_records"]] == ["anna.berg@example.com"]
    assert rows[1]["pii_also_in_records"] == []
    assert rows[2]["longest_run_words"] == 4 and rows[2]["run_record_line"] == 7
    assert [e["label"] for e in rows[3]["pii_also_in_records"]] == ["ID|NUMBER"]  # the canary
    assert report["summary"]["texts_with_pii_also_in_records"] == 2
    assert report["canaries"] == [
        {"canary": "zebra-4417-quartz", "records_holding_it": 1, "texts_repeating_it": 1}
    ]
    assert "not DP" in report["note"]
