"""PromptPATE: disjoint teachers, vote histograms (OTHER never votes), Confident-GNMax
labelling charged before release and stopped by the budget."""

from __future__ import annotations

import numpy as np
import pytest

from privlm.accounting import Budget, PrivacyLedger, confident_gnmax_curve
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.prompting.pate import (
    label_with_confident_gnmax,
    labelled_public,
    make_teachers,
    vote_histograms,
)
from privlm.prompting.scoring import OTHER
from privlm.prompting.tasks import get_task


def private(n):
    return [Record(f"text {i}", f"u{i}", "positive") for i in range(n)]


def test_teachers_are_disjoint_and_cover_what_they_need():
    ts = make_teachers(private(50), teachers=12, shots=3, seed=1)
    units = [r.unit for t in ts for r in t.demos]
    assert len(ts) == 12 and all(len(t.demos) == 3 for t in ts)
    assert len(units) == len(set(units)) == 36


def test_too_few_private_examples_is_an_error():
    with pytest.raises(PrivlmError, match="need 20 private examples"):
        make_teachers(private(10), teachers=10, shots=2)


def test_one_unit_in_two_teachers_is_refused():
    recs = [Record(f"t{i}", "same-user", "positive") for i in range(4)]
    with pytest.raises(PrivlmError, match="at most one teacher"):
        make_teachers(recs, teachers=2, shots=2)


def test_vote_histograms_count_classes_and_ignore_other():
    answers = np.array([[0, 1, OTHER], [0, OTHER, OTHER], [1, 1, 0]])  # 3 teachers × 3 queries
    assert vote_histograms(answers, 2).tolist() == [[2, 1], [0, 2], [1, 0]]


def ledger(tmp_path, eps):
    return PrivacyLedger(tmp_path / "l.db", "pate", Budget(eps, 1e-5))


def test_labels_follow_strong_consensus_and_every_query_is_charged(tmp_path):
    hist = np.array([[95, 5], [3, 97], [90, 10]])
    led = ledger(tmp_path, 100.0)
    res = label_with_confident_gnmax(hist, 50, 5.0, 5.0, led, 100, np.random.default_rng(0))
    assert res.labels == [0, 1, 0] and res.answered == 3 and not res.stopped_by_budget
    assert led.count() == 3
    assert res.epsilon == pytest.approx(led.spent().epsilon)


def test_a_failed_threshold_releases_nothing_and_costs_the_check_only(tmp_path):
    hist = np.array([[30, 30]])
    led = ledger(tmp_path, 100.0)
    res = label_with_confident_gnmax(hist, 1000, 5.0, 5.0, led, 100, np.random.default_rng(0))
    assert res.labels == [None] and res.answered == 0
    only_check = confident_gnmax_curve([30, 30], 1000, 5.0, 5.0, answered=False)
    assert led.spent().epsilon == pytest.approx(only_check.to_dp(1e-5).epsilon)


def test_labelling_stops_before_the_budget_is_exceeded(tmp_path):
    hist = np.array([[60, 40]] * 500)
    per = confident_gnmax_curve([60, 40], 10, 5.0, 5.0, answered=True).to_dp(1e-5).epsilon
    led = ledger(tmp_path, 3 * per)
    res = label_with_confident_gnmax(hist, 10, 5.0, 5.0, led, 100, np.random.default_rng(0))
    assert res.stopped_by_budget and 1 <= res.queries < 500
    assert led.spent().epsilon <= led.budget.epsilon
    assert led.count() == res.queries  # nothing released without its charge


def test_label_matrix_in_place_of_histograms_is_refused(tmp_path):
    with pytest.raises(PrivlmError):
        label_with_confident_gnmax(np.zeros((2, 3, 4)), 10, 1.0, 1.0, ledger(tmp_path, 1.0), 4)


def test_labelled_public_keeps_answered_inputs_with_their_new_labels():
    task = get_task("sst2")
    pub = [Record("a", "p0", None), Record("b", "p1", None), Record("c", "p2", None)]
    out = labelled_public(pub, [1, None, 0], task)
    assert [(r.text, r.label) for r in out] == [("a", "positive"), ("c", "negative")]
