"""The one path of a private mechanism (privlm.accounting.budgeted): the planned charges are
checked together before any work, each result is written only after its charge is durable,
and a charge refused at release time writes nothing."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, Charge, DpSgdPlan, PrivacyLedger
from privlm.accounting.budgeted import BudgetedRun
from privlm.accounting.relations import Relation
from privlm.errors import AccountingError, BudgetExceededError

pytestmark = pytest.mark.fast


def dpsgd_charge(name: str, sigma: float, compose: str = "rdp") -> Charge:
    plan = DpSgdPlan(sigma, 0.1, 100)
    return Charge(
        name, rdp=plan.rdp_curve(), event=plan.event(), compose=compose, relation=Relation.RECORD
    )


@pytest.fixture()
def ledger(tmp_path):
    return PrivacyLedger(tmp_path / "l.db", "d", Budget(3.0, 1e-5))


def test_a_run_that_fits_charges_before_it_writes(ledger):
    charge = dpsgd_charge("dpsgd", 2.0)
    run = BudgetedRun.start(ledger, "this run", charge)
    seen = []
    out = run.release(charge, lambda: seen.append(ledger.count()) or "written")
    assert out == "written" and seen == [1]  # the charge was durable when write ran


def test_charges_that_fit_alone_but_not_together_are_refused_before_any_work(ledger):
    one, two = dpsgd_charge("phase-1", 2.0), dpsgd_charge("phase-2", 2.0)
    alone = ledger.cost_if_charged(one).epsilon
    assert alone <= 3.0  # each fits by itself
    with pytest.raises(BudgetExceededError, match="refused before training: this JFT run"):
        BudgetedRun.start(ledger, "this JFT run", one, two)
    assert ledger.count() == 0


def test_the_joint_check_is_the_sum_of_the_curves(ledger):
    one, two = dpsgd_charge("a", 3.0), dpsgd_charge("b", 3.0)
    run = BudgetedRun.start(ledger, "run", one, two)
    together = ledger.cost_if_charged(run._together()).epsilon
    run.release(one, lambda: None)
    run.release(two, lambda: None)
    assert ledger.spent().epsilon == pytest.approx(together)


def test_a_charge_refused_at_release_writes_nothing(ledger):
    charge = dpsgd_charge("dpsgd", 2.0)
    run = BudgetedRun.start(ledger, "this run", charge)
    ledger.charge(dpsgd_charge("another run meanwhile", 2.5))
    written = []
    with pytest.raises(BudgetExceededError):
        run.release(charge, lambda: written.append(True))
    assert not written


def test_only_planned_charges_leave_and_each_once(ledger):
    charge = dpsgd_charge("dpsgd", 3.0)
    run = BudgetedRun.start(ledger, "this run", charge)
    with pytest.raises(AccountingError, match="not planned"):
        run.release(dpsgd_charge("dpsgd", 3.0), lambda: None)  # equal, but not the plan's
    run.release(charge, lambda: None)
    with pytest.raises(AccountingError, match="already charged"):
        run.release(charge, lambda: None)
    assert ledger.count() == 1


def test_a_run_without_a_ledger_still_follows_the_order():
    charge = dpsgd_charge("dpsgd", 2.0)
    run = BudgetedRun.start(None, "this run", charge)
    assert run.release(charge, lambda: 7) == 7 and run.charged == [charge]


def test_a_single_pld_charge_is_checked_by_pld(ledger):
    charge = dpsgd_charge("dpsgd", 2.0, compose="pld")
    run = BudgetedRun.start(ledger, "this run", charge)
    assert run._together() is charge


def test_a_charge_names_its_relation_typed():
    """The relation is a required Relation: never left to the words of ``unit`` (prose such
    as "participant" or "one part removed" once read as a part or a unit)."""
    plan = DpSgdPlan(2.0, 0.1, 10)
    with pytest.raises(TypeError, match="relation"):
        Charge("dpsgd", rdp=plan.rdp_curve())  # type: ignore[call-arg]
    with pytest.raises(AccountingError, match="Relation"):
        Charge("dpsgd", rdp=plan.rdp_curve(), relation="user")  # type: ignore[arg-type]
    worded = Charge("x", epsilon=0.1, unit="one partner organisation", relation=Relation.USER)
    assert worded.relation is Relation.USER and worded.unit == "one partner organisation"
    assert Charge("x", epsilon=0.1, relation=Relation.RECORD).unit == "record"


def test_a_relation_the_ledger_refuses_is_refused_before_any_work(tmp_path):
    """A per-user ledger and a per-record run: refused at ``start`` (before training), not
    at ``release`` after it; ``fits`` says no, and nothing is recorded."""
    users = PrivacyLedger(tmp_path / "u.db", "d", Budget(8.0, 1e-5), relation=Relation.USER)
    plan = DpSgdPlan(2.0, 0.1, 10)
    per_record = Charge("dpsgd", rdp=plan.rdp_curve(), relation=Relation.RECORD)
    worked = []
    with pytest.raises(AccountingError, match=r"before any work.*per add or remove one record"):
        BudgetedRun.start(users, "this DP-SGD run", per_record)
        worked.append(True)
    assert not worked and not users.fits(per_record) and users.count() == 0
    per_user = Charge("dpsgd", rdp=plan.rdp_curve(), relation=Relation.USER)
    assert users.fits(per_user)


def test_planned_charges_of_two_relations_are_refused_together(ledger):
    curve = DpSgdPlan(2.0, 0.1, 10).rdp_curve()
    record = Charge("a", rdp=curve, relation=Relation.RECORD)
    part = Charge("b", rdp=curve, relation=Relation.PART)
    with pytest.raises(AccountingError, match="two promises"):
        BudgetedRun.start(ledger, "a mixed run", record, part)
    with pytest.raises(AccountingError, match="two promises"):
        BudgetedRun.start(None, "a mixed run", record, part)._together()
    assert ledger.count() == 0


def test_a_legacy_row_without_a_recorded_relation_reads_it_from_its_unit(tmp_path):
    """Rows written before relations were recorded keep their meaning: Relation.parse of
    their unit, for those rows only."""
    from sqlalchemy import update

    from privlm.accounting.ledger import charges_table

    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(8.0, 1e-5), relation=Relation.PART)
    led.charge(Charge("submix", epsilon=0.1, unit="part", relation=Relation.PART))
    with led._engine.begin() as conn:
        conn.execute(update(charges_table).values(params="{}"))
    [row] = led.charges()
    assert row.params == {} and row.relation is Relation.PART


def test_a_restarted_job_finds_its_recorded_charges_and_never_pays_twice(tmp_path):
    """Through a job-tagged ledger each planned charge is recorded with its step; the same
    plan started again (the job restarted) skips the steps it paid, checks only the rest,
    and an untagged ledger (every library run a new release) pays each run."""
    from privlm.accounting import Budget, PrivacyLedger, Relation, data_independent_query_curve
    from privlm.accounting.budgeted import recorded_steps

    curve = data_independent_query_curve(2.0, 2.0)
    budget = Budget(curve.times(3).to_dp(1e-5).epsilon * 1.0001, 1e-5)
    led = PrivacyLedger(tmp_path / "l.db", "d", budget).tagged(job="job-1")
    plan = [Charge("step", rdp=curve, relation=Relation.USER) for _ in range(3)]
    first = BudgetedRun.start(led, "a run", *plan)
    first.release(plan[0], lambda: None)
    first.release(plan[1], lambda: None)  # then the worker dies
    assert set(recorded_steps(led, "a run")) == {0, 1}
    again = [Charge("step", rdp=curve, relation=Relation.USER) for _ in range(3)]
    resumed = BudgetedRun.start(led, "a run", *again)  # all three would not fit twice over
    assert resumed.paid == {0, 1}
    assert [resumed.release(c, lambda: "ok") for c in again] == ["ok"] * 3
    assert led.count() == 3
    other = led.tagged(job="job-2")
    with pytest.raises(BudgetExceededError):
        BudgetedRun.start(other, "a run", *again)  # another job's steps are not its own
    plain = PrivacyLedger(tmp_path / "l.db", "e", budget)
    for _ in range(2):
        run = BudgetedRun.start(plain, "a run", plan[0])
        run.release(plan[0], lambda: None)
    assert plain.count() == 2 and recorded_steps(plain, "a run") == {}


def test_a_restart_whose_plan_changed_is_refused_rather_than_guessed(tmp_path):
    from privlm.accounting import Budget, PrivacyLedger, Relation, data_independent_query_curve

    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(50.0, 1e-5)).tagged(job="job-1")
    one = Charge("step", rdp=data_independent_query_curve(2.0, 2.0), relation=Relation.USER)
    BudgetedRun.start(led, "a run", one).release(one, lambda: None)
    cheaper = Charge("step", rdp=data_independent_query_curve(4.0, 4.0), relation=Relation.USER)
    with pytest.raises(AccountingError, match="not the one it plans now"):
        BudgetedRun.start(led, "a run", cheaper)
