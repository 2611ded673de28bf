"""PromptPATE: disjoint teachers, vote histograms (OTHER never votes), Confident-GNMax
labelling charged before release, on a number of queries the votes never change; the
data-dependent cost released through smooth sensitivity."""

from __future__ import annotations

import numpy as np
import pytest

from privlm.accounting import (
    Budget,
    Charge,
    PrivacyLedger,
    SmoothRelease,
    data_independent_query_curve,
    release_data_dependent_rdp,
)
from privlm.accounting.relations import Relation
from privlm.data import Record
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.prompting.pate import (
    LabellingPlan,
    label_with_confident_gnmax,
    labelled_public,
    make_teachers,
    vote_histograms,
)
from privlm.prompting.scoring import OTHER
from privlm.prompting.tasks import get_task

pytestmark = pytest.mark.fast


def private(n):
    return [Record(f"text {i}", f"u{i}", "positive") for i in range(n)]


KEY = "00112233445566778899aabbccddeeff"


def test_teachers_are_disjoint_and_each_uses_at_most_its_shots():
    ts = make_teachers(private(120), teachers=12, shots=3, key=KEY)
    units = [r.unit for t in ts for r in t.demos]
    assert len(ts) == 12 and all(len(t.demos) <= 3 for t in ts)
    assert len(units) == len(set(units))
    assert sum(len(t.demos) == 3 for t in ts) >= 9  # ten examples per teacher on average


def test_a_users_examples_stay_with_one_teacher():
    recs = [Record(f"t{i}", f"user-{i % 5}", "positive") for i in range(40)]
    ts = make_teachers(recs, teachers=4, shots=8, key=KEY)
    owners = {r.unit: i for i, t in enumerate(ts) for r in t.demos}
    for i, t in enumerate(ts):
        assert all(owners[r.unit] == i for r in t.demos)


def test_an_empty_teacher_abstains():
    ts = make_teachers(private(3), teachers=10, shots=1, key=KEY)
    assert sum(t.abstains for t in ts) >= 7
    with pytest.raises(PrivlmError, match="needs private examples"):
        make_teachers([], teachers=3)


def demos(ts):
    return [tuple((r.text, r.label) for r in t.demos) for t in ts]


@pytest.mark.parametrize("trial", range(4))
def test_removing_one_private_example_changes_one_teacher_only(trial):
    """GNMax's sensitivity: a neighbouring private set changes at most one teacher's vote.
    Record-level units are renumbered after a removal, as a loader would number them."""
    rng = np.random.default_rng(trial)
    rows = [
        (f"review {int(rng.integers(40))}", ["positive", "negative"][int(rng.integers(2))])
        for _ in range(90)
    ]

    def load(rs):
        return [Record(t, f"record-{i}", lab) for i, (t, lab) in enumerate(rs)]

    before = demos(make_teachers(load(rows), 30, 1, KEY))
    for i in range(len(rows)):
        after = demos(make_teachers(load(rows[:i] + rows[i + 1 :]), 30, 1, KEY))
        assert sum(a != b for a, b in zip(before, after, strict=True)) <= 1


def test_the_old_permutation_teachers_change_many():
    """privlm's old rule (a permutation of all private examples) fails the check above."""
    rows = private(90)

    def old(rs):
        order = np.random.default_rng(0).permutation(len(rs))[:30]
        return [((rs[int(i)].text, rs[int(i)].label),) for i in order]

    before = old(rows)
    worst = max(
        sum(a != b for a, b in zip(before, old(rows[:i] + rows[i + 1 :]), strict=True))
        for i in range(10)
    )
    assert worst > 1


def test_vote_histograms_count_classes_and_ignore_other():
    answers = np.array([[0, 1, OTHER], [0, OTHER, OTHER], [1, 1, 0]])  # 3 teachers × 3 queries
    assert vote_histograms(answers, 2).tolist() == [[2, 1], [0, 2], [1, 0]]


def ledger(tmp_path, eps):
    return PrivacyLedger(tmp_path / "l.db", "pate", Budget(eps, 1e-5))


def test_data_independent_labels_follow_consensus_and_each_query_is_charged_first(tmp_path):
    hist = np.array([[95, 5], [3, 97], [90, 10]])
    led = ledger(tmp_path, 100.0)
    res = label_with_confident_gnmax(
        hist, 50, 5.0, 5.0, LabellingPlan.start(led, 5.0, 5.0, 3), 100, 0
    )
    assert res.labels == [0, 1, 0] and res.answered == 3 and not res.stopped_by_budget
    assert led.count() == 3 and res.accounting == "data-independent"
    worst = data_independent_query_curve(5.0, 5.0)
    assert res.epsilon == pytest.approx(worst.times(3).to_dp(1e-5).epsilon)


@pytest.mark.parametrize("votes", [[99, 1], [50, 50], [0, 0]])
def test_data_independent_query_count_never_depends_on_the_votes(tmp_path, votes):
    """The stopping decision is a function of the budget and σ's only."""
    per = data_independent_query_curve(5.0, 5.0)
    led = ledger(tmp_path, per.times(7).to_dp(1e-5).epsilon * 1.0001)
    res = label_with_confident_gnmax(
        np.array([votes] * 500), 10, 5.0, 5.0, LabellingPlan.start(led, 5.0, 5.0, 500), 100, 0
    )
    assert res.queries == 7 and res.stopped_by_budget
    assert led.count() == 7 and led.spent().epsilon <= led.budget.epsilon


def test_the_released_estimate_falls_below_the_true_cost_about_half_the_time():
    """Why: over many draws of the release noise, the GNSS estimate is below the exact
    data-dependent RDP with probability about ½."""
    hist = np.array([[95, 5], [30, 30], [3, 97]])
    rel = SmoothRelease(order=10.0, beta=0.04, sigma=5.0)
    answered = [True, False, True]
    exact = release_data_dependent_rdp(hist, answered, 100, 50, 5.0, 5.0, rel, 0.0).noisy_rdp
    draws = np.random.default_rng(0).standard_normal(400)
    below = [
        release_data_dependent_rdp(hist, answered, 100, 50, 5.0, 5.0, rel, float(z)).noisy_rdp
        < exact
        for z in draws
    ]
    assert 0.4 < np.mean(below) < 0.6


def test_label_matrix_in_place_of_histograms_is_refused(tmp_path):
    with pytest.raises(PrivlmError):
        label_with_confident_gnmax(
            np.zeros((2, 3, 4)),
            10,
            1.0,
            1.0,
            LabellingPlan.start(ledger(tmp_path, 1.0), 1.0, 1.0, 2),
            4,
        )


def test_labelled_public_keeps_answered_inputs_with_their_new_labels():
    task = get_task("sst2")
    pub = [Record("a", "p0", None), Record("b", "p1", None), Record("c", "p2", None)]
    out = labelled_public(pub, [1, None, 0], task)
    assert [(r.text, r.label) for r in out] == [("a", "positive"), ("c", "negative")]


def test_data_dependent_accounting_is_refused_when_configured_before_any_vote():
    from privlm.prompting.config import PromptPateConfig

    with pytest.raises(PrivlmError, match="upper bound"):
        PromptPateConfig(accounting="data-dependent")


def test_each_label_is_drawn_only_after_its_charge_is_durable(tmp_path, monkeypatch):
    """Step 4 of plan → check → run → charge → release: the ledger holds query i's charge
    when query i's noise is drawn, and a ledger that refuses a charge stops the labelling
    with no label drawn for it."""
    import privlm.prompting.pate as module

    led = ledger(tmp_path, 100.0)
    plan = LabellingPlan.start(led, 5.0, 5.0, 4)
    seen = []
    real = module._confident_gnmax

    def spy(*args):
        seen.append(led.count())
        return real(*args)

    monkeypatch.setattr(module, "_confident_gnmax", spy)
    label_with_confident_gnmax(np.array([[95, 5]] * 4), 50, 5.0, 5.0, plan, 100, 0)
    assert seen == [1, 2, 3, 4]
    (tmp_path / "x").mkdir()
    other = ledger(tmp_path / "x", 100.0)
    plan = LabellingPlan.start(other, 5.0, 5.0, 4)
    other.charge(
        Charge("elsewhere", epsilon=99.9, delta=0.0, relation=Relation.RECORD)
    )  # another run spends it
    seen.clear()
    with pytest.raises(BudgetExceededError):
        label_with_confident_gnmax(np.array([[95, 5]] * 4), 50, 5.0, 5.0, plan, 100, 0)
    assert seen == []


def test_the_plan_refuses_before_any_vote_when_the_budget_affords_too_few_queries(tmp_path):
    per = data_independent_query_curve(5.0, 5.0)
    led = ledger(tmp_path, per.times(2).to_dp(1e-5).epsilon * 1.0001)
    plan = LabellingPlan.start(led, 5.0, 5.0, 100)
    assert plan.queries == 2 and plan.stopped_by_budget and led.count() == 0


def test_each_query_is_charged_at_the_unit_teachers_are_keyed_by(tmp_path):
    """Users' examples sit in one teacher each, so the guarantee (and the charge) is per
    user where the data names users."""
    from privlm.accounting import Relation
    from privlm.prompting.pate_pipeline import unit_kind

    assert unit_kind([Record("a", "record-1", None)]) == "record"
    assert unit_kind([Record("a", "alice", None), Record("b", "record-2", None)]) == "user"
    plan = LabellingPlan.start(ledger(tmp_path, 100.0), 5.0, 5.0, 2, "user")
    assert {c.relation for c in plan.budget.planned} == {Relation.USER}
