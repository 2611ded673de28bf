"""The generalisation measurement's data (development and held-out template families, split
by family and by value source), the every-letter-and-digit recall, the learned tagger's
mechanics on the tiny model, and the detector record JFT states."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings

import pytest

from privlm.detect.annotated import AnnotatedText
from privlm.detect.base import Span
from privlm.detect.pii_families import (
    DEV_FAMILIES,
    DEV_SOURCES,
    NO_PII,
    ROW_WORDS,
    SLOT_TYPES,
    family_corpus,
    figures_row,
)
from privlm.detect.pii_families_heldout import HELDOUT_FAMILIES, HELDOUT_SOURCES
from privlm.detect.pii_quality import score_texts
from privlm.errors import PrivlmError

pytestmark = pytest.mark.fast


def test_the_held_out_side_shares_no_family_template_or_value_source():
    dev = {t for ts in DEV_FAMILIES.values() for t in ts}
    held = {t for ts in HELDOUT_FAMILIES.values() for t in ts}
    assert not dev & held and not set(DEV_FAMILIES) & set(HELDOUT_FAMILIES)
    assert not set(DEV_SOURCES) & set(HELDOUT_SOURCES)
    assert all(s.startswith("faker:") for s in (*DEV_SOURCES, *HELDOUT_SOURCES))


def test_a_family_corpus_records_every_slot_value_with_its_type():
    corpus = family_corpus(200, HELDOUT_FAMILIES, HELDOUT_SOURCES, seed=4, negatives=0.1)
    assert corpus == family_corpus(200, HELDOUT_FAMILIES, HELDOUT_SOURCES, seed=4, negatives=0.1)
    kinds = {s.label for a in corpus for s in a.sensitive}
    assert {"PERSON", "STREET_ADDRESS", "GPE", "ORGANIZATION"} <= kinds
    assert kinds <= {k for k in SLOT_TYPES.values() if k}
    assert any(a.text in NO_PII for a in corpus)
    for a in corpus:
        for s in a.sensitive:
            assert a.text[s.start : s.end].strip() == a.text[s.start : s.end] != ""


def test_table_rows_label_the_name_and_never_the_figures():
    corpus = family_corpus(400, {"tables": DEV_FAMILIES["tables"]}, DEV_SOURCES, seed=3)
    kinds = {s.label for a in corpus for s in a.sensitive}
    assert kinds == {"PERSON", "GPE", "ORGANIZATION"}
    for a in corpus:
        named = set()
        for s in a.sensitive:
            named.update(range(s.start, s.end))
        figures = [i for i, c in enumerate(a.text) if c.isdigit() and i not in named]
        assert figures, a.text  # every row has figures outside its spans
        assert not any(a.text[s.start : s.end][-1].isdigit() for s in a.sensitive)


def test_the_negatives_include_rows_of_figures_led_by_a_common_word():
    rng = random.Random(0)
    rows = [figures_row(rng) for _ in range(200)]
    assert all(any(r.startswith(w + " ") for w in ROW_WORDS) for r in rows)
    assert all(any(c.isdigit() for c in r) for r in rows)
    corpus = family_corpus(2000, DEV_FAMILIES, DEV_SOURCES, seed=0, negatives=0.1, figure_rows=0.05)
    negatives = [a.text for a in corpus if not a.sensitive]
    prose = sum(t in NO_PII for t in negatives)
    rows = len(negatives) - prose
    assert 150 <= prose <= 250 and 60 <= rows <= 140  # the two shares, 200 and 100 expected
    assert not [a for a in family_corpus(300, DEV_FAMILIES, DEV_SOURCES, 0, negatives=0.2)
                if not a.sensitive and a.text not in NO_PII]  # fmt: skip


@pytest.mark.parametrize("shares", [(-0.1, 0.0), (0.0, -0.1), (0.6, 0.5)])
def test_negative_shares_outside_zero_to_one_are_refused(shares):
    with pytest.raises(PrivlmError, match="shares"):
        family_corpus(10, DEV_FAMILIES, DEV_SOURCES, 0, negatives=shares[0], figure_rows=shares[1])


_DIGEST = """
import hashlib
from privlm.detect.pii_corpus import pii_corpus
from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
from privlm.detect.pii_families_heldout import FRESH_SOURCES, HELDOUT_FAMILIES, HELDOUT_SOURCES
draws = [family_corpus(300, DEV_FAMILIES, DEV_SOURCES, 0),
         family_corpus(300, HELDOUT_FAMILIES, HELDOUT_SOURCES, 1),
         family_corpus(300, HELDOUT_FAMILIES, FRESH_SOURCES, 1),
         pii_corpus(200, 1, held_out=True)]
print(hashlib.sha256(repr(draws).encode()).hexdigest())
"""


def test_a_seed_gives_the_same_sentences_in_every_process():
    # Python's hash seed differs per process; a draw that iterates a set would move with it
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        run = subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        digests.add(run.stdout.strip().splitlines()[-1])
    assert len(digests) == 1


def test_every_letter_and_digit_recall_forgives_punctuation_only():
    text = "Ship to 12 Main St, Springfield today"
    gold = AnnotatedText(text, (Span(8, 30, "STREET_ADDRESS"),))
    no_comma = [Span(8, 18, "STREET_ADDRESS"), Span(20, 30, "GPE")]
    q = score_texts("d", [gold], [no_comma], 1.0)
    r = q.recall_by_type["STREET_ADDRESS"]
    assert r.full == 0.0 and r.alnum == 1.0 and r.overlap == 1.0
    q = score_texts("d", [gold], [[Span(8, 18, "X")]], 1.0)
    assert q.recall_by_type["STREET_ADDRESS"].alnum == 0.0


# -- the tagger's token labels (no model) ---------------------------------------------------


def test_token_labels_mark_each_spans_first_token_b_and_the_rest_i():
    from privlm.detect.tagger import LABELS, token_labels

    offsets = [(0, 4), (4, 9), (9, 13), (13, 20)]  # "Ann| Lee| of| Leeds"
    spans = [Span(0, 8, "PERSON"), Span(14, 19, "GPE")]
    got = [LABELS[i] for i in token_labels(offsets, spans)]
    assert got == ["B-PERSON", "I-PERSON", "O", "B-GPE"]


def test_decode_joins_a_types_adjacent_tokens_and_trims_spaces():
    from privlm.detect.tagger import LABELS, decode

    text = "to 12 Main St, Leeds now"
    offsets = [(0, 2), (2, 5), (5, 10), (10, 13), (13, 14), (14, 20), (20, 24)]
    ids = [LABELS.index(x) for x in ("O", "B-STREET_ADDRESS", "I-STREET_ADDRESS",
                                       "I-STREET_ADDRESS", "I-STREET_ADDRESS", "B-GPE", "O")]  # fmt: skip
    assert decode(text, offsets, ids) == [Span(3, 14, "STREET_ADDRESS"), Span(15, 20, "GPE")]


# -- what JFT states about its detector ------------------------------------------------------


def test_the_detector_record_states_the_measured_held_out_recall(monkeypatch, tmp_path):
    from privlm.detect import provenance
    from privlm.detect.tagger import PRECISION_ENV, PRECISIONS

    measured = tmp_path / "heldout_recall.json"
    measured.write_text(json.dumps({
        "measured_on": "held-out families, seed 1",
        "tagger": {"version": "2", "layer": 5, "precision": "bfloat16"}, "detectors": {
            "pii": {"full_span_recall": {"PERSON": 0.97, "STREET_ADDRESS": 0.93, "GPE": 0.91},
                    "over_redaction": 0.12}}}))  # fmt: skip
    monkeypatch.setattr(provenance, "MEASURED", measured)
    provenance._measured.cache_clear()
    try:
        pii = type("D", (), {"name": "pii"})()
        rec = provenance.detector_record(pii)
        assert rec["heldout_recall"]["PERSON"] == 0.97 and "tagger" in rec["version"]
        assert rec["tagger"]["precision"] == "bfloat16" and rec["tagger"]["layer"] == 5
        assert rec["tagger"]["precision_here"] in PRECISIONS
        assert "PERSON 0.97, STREET_ADDRESS 0.93, GPE 0.91" in provenance.recall_line(rec)
        monkeypatch.setenv(PRECISION_ENV, "bfloat16")  # as measured: nothing to add
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # emulated bfloat16 on some CPUs
            assert "precision_note" not in provenance.detector_record(pii)["tagger"]
        monkeypatch.setenv(PRECISION_ENV, "float32")  # another precision: the record says so
        note = provenance.detector_record(pii)["tagger"]["precision_note"]
        assert "measured with the tagger in bfloat16" in note and "runs in float32" in note
        other = provenance.detector_record(type("D", (), {"name": "mine"})())
        assert other["heldout_recall"] is None and "annotated" in other["note"]
    finally:
        provenance._measured.cache_clear()
