"""Mechanism events, PLD composition in the ledger, and ledgers written before
events existed. Every figure is checked against dp-accounting or Opacus directly."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from privlm.accounting.analysis.conversion import balle_epsilon
from privlm.accounting.composition import DELTA_SPLITS
from privlm.accounting.curves import RdpCurve
from privlm.accounting.dpsgd import DpSgdPlan, dpsgd_epsilon
from privlm.accounting.events import MechanismEvent, laplace_rdp, pld_epsilon
from privlm.accounting.ledger import Budget, Charge, PrivacyLedger
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.accounting.relations import Relation
from privlm.errors import AccountingError, BudgetExceededError

pytestmark = pytest.mark.fast

DATA = Path(__file__).parent / "data"
DELTA = 1e-5


def dpsgd_charge(sigma: float, q: float, steps: int, accountant: str) -> Charge:
    plan = DpSgdPlan(sigma, q, steps)
    return Charge(
        "dpsgd",
        rdp=plan.rdp_curve(),
        event=plan.event(),
        compose="pld" if accountant == "prv" else "rdp",
        relation=Relation.RECORD,
    )


def fine_pld(*events: MechanismEvent, delta: float = DELTA) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for e in events:
        acc.compose(e.to_dp_event())
    return float(acc.get_epsilon(delta))


# -- events ------------------------------------------------------------------------------------


def test_events_round_trip_and_refuse_nonsense():
    e = MechanismEvent.poisson_gaussian(1.2, 0.02, 500)
    assert MechanismEvent.from_dict(json.loads(json.dumps(e.to_dict()))) == e
    for bad in (
        dict(kind="exponential", noise=1.0),
        dict(kind="gaussian", noise=0.0),
        dict(kind="gaussian", noise=1.0, sample_rate=0.5),
        dict(kind="poisson_gaussian", noise=1.0, sample_rate=1.5),
        dict(kind="laplace", noise=1.0, count=0),
    ):
        with pytest.raises(AccountingError):
            MechanismEvent(**bad)  # type: ignore[arg-type]
    with pytest.raises(AccountingError, match="not a mechanism event"):
        MechanismEvent.from_dict({"noise": 1.0})


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_laplace_rdp_matches_dp_accounting(scale):
    orders = [1.5, 2.0, 3.0, 8.0, 32.0]
    acc = rdp_privacy_accountant.RdpAccountant(orders)
    acc.compose(dp_accounting.LaplaceDpEvent(scale), 3)
    theirs = acc._rdp  # the accountant's composed curve at ``orders``
    ours = MechanismEvent("laplace", scale, count=3).rdp_curve(orders).at(orders)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    # and the closed form at order 2 by hand: log(2/3·e^{1/b} + 1/3·e^{-2/b})
    assert laplace_rdp(scale, [2.0])[0] == pytest.approx(
        math.log(2 / 3 * math.exp(1 / scale) + 1 / 3 * math.exp(-2 / scale))
    )


def test_gaussian_event_curves_are_privlms_curves():
    plan = DpSgdPlan(0.9, 0.05, 200)
    np.testing.assert_array_equal(
        plan.event().rdp_curve().at(DEFAULT_ORDERS), plan.rdp_curve().at(DEFAULT_ORDERS)
    )
    g = MechanismEvent("gaussian", 2.0, count=4).rdp_curve([2.0, 10.0]).at([2.0, 10.0])
    np.testing.assert_allclose(g, [4 * 2 / 8, 4 * 10 / 8])


@pytest.mark.parametrize(
    "events",
    [
        (MechanismEvent.poisson_gaussian(1.1, 0.01, 1000),),
        (MechanismEvent("gaussian", 3.0, count=5), MechanismEvent("laplace", 2.0, count=2)),
        (MechanismEvent.poisson_gaussian(0.8, 0.1, 30), MechanismEvent("gaussian", 5.0)),
    ],
)
def test_pld_epsilon_is_a_pessimistic_bound_close_to_the_fine_pld(events):
    ours, fine = pld_epsilon(events, DELTA), fine_pld(*events)
    assert fine <= ours <= fine * 1.005 + 1e-6
    # and never looser than RDP of the same events
    rdp = sum((e.rdp_curve() for e in events[1:]), events[0].rdp_curve())
    assert ours <= rdp.to_dp(DELTA).epsilon


# -- the ledger ----------------------------------------------------------------------------------


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_the_ledger_epsilon_of_one_dpsgd_run_equals_privacy_json(tmp_path, accountant):
    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(10.0, DELTA))
    spent = led.charge(dpsgd_charge(1.1, 0.01, 1000, accountant))
    stated = dpsgd_epsilon(1.1, 0.01, 1000, DELTA, accountant).epsilon
    assert spent.epsilon == led.spent().epsilon == stated
    assert spent.method == ("pld" if accountant == "prv" else "rdp")
    record = led.charges()[0]
    assert record.params["dp_event"] == DpSgdPlan(1.1, 0.01, 1000).event().to_dict()
    assert record.params["composed_by"] == ("pld" if accountant == "prv" else "rdp")
    assert led.verify()


def test_pld_charges_compose_by_pld(tmp_path):
    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(20.0, DELTA))
    a, b = dpsgd_charge(1.1, 0.01, 1000, "prv"), dpsgd_charge(0.9, 0.05, 300, "prv")
    led.charge(a)
    spent = led.charge(b)
    assert spent.epsilon == pytest.approx(fine_pld(a.event, b.event), rel=0.005)
    assert spent.epsilon < (a.rdp + b.rdp).to_dp(DELTA).epsilon  # type: ignore[operator]


def test_pld_and_rdp_charges_compose_by_the_tighter_sound_rule(tmp_path):
    """An independent computation of the module docstring's two statements."""
    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(20.0, DELTA))
    token = RdpCurve.from_arrays(DEFAULT_ORDERS, np.asarray(DEFAULT_ORDERS) * 0.002)
    run = dpsgd_charge(1.0, 0.02, 800, "prv")
    led.charge(Charge("pmixed-token", rdp=token, relation=Relation.RECORD))
    led.charge(run)
    led.charge(Charge("pmixed-token", rdp=token, relation=Relation.RECORD))
    spent = led.charge(Charge("count", epsilon=0.05, delta=1e-7, relation=Relation.RECORD))
    assert run.event is not None and run.rdp is not None
    orders = np.asarray(DEFAULT_ORDERS)
    rest = 2 * token.at(orders)
    everything = balle_epsilon(orders, rest + run.rdp.at(orders), DELTA - 1e-7).epsilon + 0.05
    avail = DELTA - 1e-7
    split = 0.05 + min(
        pld_epsilon((run.event,), f * avail) + balle_epsilon(orders, rest, (1 - f) * avail).epsilon
        for f in DELTA_SPLITS
    )
    assert spent.epsilon == pytest.approx(min(everything, split), rel=1e-12)
    assert split < everything and spent.method == "pld+rdp"
    assert led.verify()


def test_a_pld_charge_over_budget_is_refused_and_records_nothing(tmp_path):
    led = PrivacyLedger(tmp_path / "l.db", "d", Budget(2.0, DELTA))
    led.charge(dpsgd_charge(1.1, 0.01, 1000, "prv"))  # 1.52; twice: 2.16
    before = led.spent()
    with pytest.raises(BudgetExceededError, match="nothing was recorded"):
        led.charge(dpsgd_charge(1.1, 0.01, 1000, "prv"))
    assert led.spent() == before and led.count() == 1 and led.verify()
    with pytest.raises(AccountingError, match="charges write it"):
        led.set_flag("pld-events", "[]")


def test_a_pld_charge_needs_its_event_and_curve():
    with pytest.raises(AccountingError, match="PLD needs"):
        Charge(
            "x", rdp=DpSgdPlan(1.0, 0.1, 10).rdp_curve(), compose="pld", relation=Relation.RECORD
        )
    with pytest.raises(AccountingError, match="compose"):
        Charge("x", epsilon=1.0, compose="prv", relation=Relation.RECORD)


def test_a_ledger_written_before_events_opens_and_reports_the_same_epsilon(tmp_path):
    """``ledger-v1.db`` was written by privlm before this change (a DP-SGD run, a PMixED
    token and a pure-ε charge); ``ledger-v1.json`` holds what that version reported."""
    expected = json.loads((DATA / "ledger-v1.json").read_text())
    path = tmp_path / "old.db"
    shutil.copy(DATA / "ledger-v1.db", path)
    led = PrivacyLedger(path, expected["name"])
    assert led.budget == Budget(8.0, DELTA)
    spent = led.spent()
    assert spent.epsilon == expected["epsilon"] and spent.order == expected["order"]
    assert led.count() == expected["charges"] and led.verify()
    # a PLD charge added to the old ledger composes with everything it already held
    after = led.charge(dpsgd_charge(2.0, 0.01, 500, "prv"))
    assert expected["epsilon"] < after.epsilon and led.verify()


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_what_one_tagged_job_spent_is_its_charges_composed_alone(tmp_path, accountant):
    """A job's ε is its own charges, not the dataset's running total: equal to
    a fresh ledger holding only that job's charges, and to dp-accounting's composition."""
    shared = PrivacyLedger(tmp_path / "l.db", "dataset", Budget(50.0, DELTA))
    mine = [dpsgd_charge(1.1, 0.01, 500, accountant), dpsgd_charge(0.9, 0.02, 200, accountant)]
    other = dpsgd_charge(0.8, 0.05, 300, accountant)
    shared.tagged(job="a").charge(mine[0])
    shared.tagged(job="b").charge(other)
    shared.tagged(job="a").charge(mine[1])
    shared.charge(
        Charge(
            "reservation",
            epsilon=0.5,
            params={"job": "a", "deployment": "d"},
            relation=Relation.RECORD,
        )
    )
    alone = PrivacyLedger(tmp_path / "alone.db", "a", Budget(50.0, DELTA))
    for c in mine:
        alone.charge(c)
    got = shared.spent_by(lambda r: r.params.get("job") == "a" and "deployment" not in r.params)
    assert got.epsilon == pytest.approx(alone.spent().epsilon, rel=1e-12)
    assert got.epsilon < shared.spent().epsilon
    assert [r.params.get("job") for r in shared.charges()] == ["a", "b", "a", "a"]
    acc = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_ORDERS))
    for c in mine:
        acc.compose(c.event.to_dp_event())
    if accountant == "rdp":  # dp-accounting's RDP conversion is looser than Balle's
        assert got.epsilon <= acc.get_epsilon(DELTA) + 1e-9
    else:
        assert got.epsilon == pytest.approx(pld_epsilon(tuple(c.event for c in mine), DELTA))
