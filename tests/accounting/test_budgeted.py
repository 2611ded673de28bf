"""The one path of a private mechanism (privlm.accounting.budgeted): the planned charges are
checked together before any work, each result is written only after its charge is durable,
and a charge refused at release time writes nothing."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, Charge, DpSgdPlan, PrivacyLedger
from privlm.accounting.budgeted import BudgetedRun
from privlm.errors import AccountingError, BudgetExceededError

pytestmark = pytest.mark.fast


def dpsgd_charge(name: str, sigma: float, compose: str = "rdp") -> Charge:
    plan = DpSgdPlan(sigma, 0.1, 100)
    return Charge(name, rdp=plan.rdp_curve(), event=plan.event(), compose=compose)


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
