"""The durable ledger: composition, fail-closed refusal, persistence, concurrency, crashes."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from privlm.accounting import (
    DEFAULT_ORDERS,
    Budget,
    Charge,
    DpSgdPlan,
    PrivacyLedger,
    RdpCurve,
    balle_epsilon,
    charge_together,
)
from privlm.accounting.relations import Relation
from privlm.errors import AccountingError, BudgetExceededError

pytestmark = pytest.mark.fast


@pytest.fixture
def db(tmp_path):
    return tmp_path / "ledger.db"


def test_rdp_charges_compose_and_convert_at_best_order(db):
    ledger = PrivacyLedger(db, "m", Budget(10.0, 1e-5))
    a = DpSgdPlan(1.2, 0.01, 300).rdp_curve()
    b = DpSgdPlan(0.9, 0.02, 100).rdp_curve()
    ledger.charge(Charge("dpsgd", rdp=a, relation=Relation.RECORD))
    spent = ledger.charge(Charge("dpsgd", rdp=b, relation=Relation.RECORD))
    expected = balle_epsilon(DEFAULT_ORDERS, np.asarray(a.epsilons) + np.asarray(b.epsilons), 1e-5)
    assert spent.epsilon == pytest.approx(expected.epsilon, rel=1e-12)
    assert spent.order == expected.order
    assert ledger.spent().epsilon == pytest.approx(expected.epsilon, rel=1e-12)
    assert ledger.remaining() == pytest.approx(10.0 - expected.epsilon, rel=1e-12)


def test_single_order_charges_like_pmixed(db):
    """A mechanism accounted at one order only (PMixED at α = 3): ∞ elsewhere."""
    ledger = PrivacyLedger(db, "pmixed", Budget(8.0, 1e-5))
    per_token = RdpCurve.from_mapping({3.0: 0.002})
    for _ in range(100):
        ledger.charge(
            Charge("pmixed-token", rdp=per_token, unit="ensemble member", relation=Relation.UNIT)
        )
    spent = ledger.spent()
    assert spent.order == 3.0
    expected = 0.2 + math.log(2 / 3) - (math.log(1e-5) + math.log(3)) / 2
    assert spent.epsilon == pytest.approx(expected, rel=1e-12)


def test_approximate_dp_charges_add_up(db):
    ledger = PrivacyLedger(db, "approx", Budget(1.0, 1e-5))
    ledger.charge(Charge("laplace", epsilon=0.25, relation=Relation.RECORD))
    ledger.charge(Charge("gauss", epsilon=0.25, delta=1e-6, relation=Relation.RECORD))
    assert ledger.spent().epsilon == 0.5
    # mixing with RDP: the RDP part converts at δ minus the approximate δ already spent
    ledger.charge(Charge("rdp", rdp=RdpCurve.from_mapping({20.0: 0.01}), relation=Relation.RECORD))
    conv = balle_epsilon([20.0], [0.01], 1e-5 - 1e-6)
    assert ledger.spent().epsilon == pytest.approx(0.5 + conv.epsilon, rel=1e-12)


def test_refusal_records_nothing_and_says_why(db):
    ledger = PrivacyLedger(db, "r", Budget(1.0, 1e-5))
    ledger.charge(Charge("m", epsilon=0.75, relation=Relation.RECORD))
    with pytest.raises(BudgetExceededError) as err:
        ledger.charge(Charge("big-mechanism", epsilon=0.5, relation=Relation.RECORD))
    msg = str(err.value)
    assert (
        "big-mechanism" in msg and "1.25" in msg and "ε=1" in msg and "nothing was recorded" in msg
    )
    assert len(ledger.charges()) == 1
    assert ledger.spent().epsilon == 0.75
    ledger.charge(
        Charge("m", epsilon=0.25, relation=Relation.RECORD)
    )  # exactly the budget still fits
    assert ledger.remaining() == 0.0


def test_charge_at_orders_the_ledger_lacks_is_refused(db):
    ledger = PrivacyLedger(db, "o", Budget(100.0, 1e-5))
    with pytest.raises(BudgetExceededError, match="infinite at every order"):
        ledger.charge(
            Charge("odd", rdp=RdpCurve.from_mapping({2.55: 0.1}), relation=Relation.RECORD)
        )
    assert ledger.charges() == []


def test_delta_exhaustion_is_refused(db):
    ledger = PrivacyLedger(db, "d", Budget(5.0, 1e-5))
    with pytest.raises(BudgetExceededError):
        ledger.charge(Charge("m", epsilon=0.1, delta=2e-5, relation=Relation.RECORD))


def test_persisted_across_reopen_and_budget_cannot_change(db):
    ledger = PrivacyLedger(db, "p", Budget(2.0, 1e-6))
    ledger.charge(Charge("m", epsilon=0.5, unit="user", params={"k": 1}, relation=Relation.USER))
    ledger.close()
    again = PrivacyLedger(db, "p")
    assert again.budget == Budget(2.0, 1e-6)
    [rec] = again.charges()
    assert (rec.mechanism, rec.epsilon, rec.unit) == ("m", 0.5, "user")
    assert rec.params == {"k": 1, "relation": "user"}  # the typed relation, recorded
    assert rec.relation is Relation.USER
    assert rec.created_at.endswith("+00:00")
    with pytest.raises(AccountingError, match="cannot be reopened"):
        PrivacyLedger(db, "p", Budget(3.0, 1e-6))
    with pytest.raises(AccountingError, match="does not exist"):
        PrivacyLedger(db, "other")


def test_ledgers_in_one_file_are_independent(db):
    a = PrivacyLedger(db, "a", Budget(1.0, 1e-5))
    b = PrivacyLedger(db, "b", Budget(1.0, 1e-5))
    a.charge(Charge("m", epsilon=1.0, relation=Relation.RECORD))
    assert b.spent().epsilon == 0.0


def test_export_json(db, tmp_path):
    ledger = PrivacyLedger(db, "j", Budget(8.0, 1e-5))
    ledger.charge(
        Charge(
            "dpsgd",
            rdp=DpSgdPlan(1.0, 0.01, 100).rdp_curve(),
            params={"s": 1.0},
            relation=Relation.RECORD,
        )
    )
    out = tmp_path / "ledger.json"
    ledger.export_json(out)
    data = json.loads(out.read_text())
    assert data["budget"] == {"epsilon": 8.0, "delta": 1e-5, "order": None}
    assert data["charges"][0]["mechanism"] == "dpsgd"
    assert data["spent"]["epsilon"] == pytest.approx(ledger.spent().epsilon)
    assert data["relation"] == "add or remove one record"  # its first charge was per record


def test_invalid_charges_refused():
    with pytest.raises(AccountingError, match="carry a cost"):
        Charge("nothing", relation=Relation.RECORD)
    with pytest.raises(AccountingError):
        Charge("neg", epsilon=-1.0, relation=Relation.RECORD)
    with pytest.raises(AccountingError):
        Budget(float("inf"), 1e-5)


WORKER = textwrap.dedent(
    """
    import sys
    from privlm.accounting import Budget, Charge, PrivacyLedger, Relation
    from privlm.errors import BudgetExceededError
    ledger = PrivacyLedger(sys.argv[1], "shared")
    ok = refused = 0
    for _ in range(int(sys.argv[2])):
        try:
            ledger.charge(Charge("worker", epsilon=0.25, relation=Relation.RECORD))
            ok += 1
        except BudgetExceededError:
            refused += 1
    print(ok, refused)
    """
)


def test_concurrent_processes_never_overdraw(db):
    """Four processes race 30 charges each at a budget that fits exactly 36."""
    PrivacyLedger(db, "shared", Budget(9.0, 1e-5)).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(db), "30"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    results = [tuple(map(int, p.communicate(timeout=300)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(ok for ok, _ in results) == 36
    assert sum(r for _, r in results) == 4 * 30 - 36
    ledger = PrivacyLedger(db, "shared")
    assert len(ledger.charges()) == 36
    assert ledger.spent().epsilon == 9.0
    assert ledger.verify()


def test_sigkill_mid_charging_leaves_a_consistent_ledger(db):
    PrivacyLedger(db, "shared", Budget(1e9, 1e-5)).close()
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(db), "1000000"])
    deadline = time.time() + 60
    while time.time() < deadline:
        time.sleep(0.5)
        if len(PrivacyLedger(db, "shared").charges()) >= 20:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ledger = PrivacyLedger(db, "shared")
    n = len(ledger.charges())
    assert n >= 20
    assert ledger.verify()
    assert ledger.spent().epsilon == 0.25 * n
    assert [c.seq for c in ledger.charges()] == list(range(1, n + 1))


def test_rdp_budget_at_one_order(db):
    """SubMix keeps (α, ε_i)-RDP budgets per part: spent is the raw RDP at that order."""
    ledger = PrivacyLedger(db, "part-0", Budget(1.0, 1e-5, order=2.0))
    ledger.charge(
        Charge("submix", rdp=RdpCurve.from_mapping({2.0: 0.75}), relation=Relation.RECORD)
    )
    assert ledger.spent().epsilon == 0.75 and ledger.spent().order == 2.0
    with pytest.raises(BudgetExceededError, match="RDP ε=1 at order α=2"):
        ledger.charge(
            Charge("submix", rdp=RdpCurve.from_mapping({2.0: 0.5}), relation=Relation.RECORD)
        )
    ledger.charge(
        Charge("submix", rdp=RdpCurve.from_mapping({2.0: 0.25}), relation=Relation.RECORD)
    )
    assert ledger.remaining() == 0.0
    odd = PrivacyLedger(db, "odd-order", Budget(1.0, 1e-5, order=2.55))
    assert 2.55 in odd.orders


def test_charge_together_is_all_or_nothing(db):
    a, b, c = PrivacyLedger.family(db, ["a", "b", "c"], Budget(1.0, 1e-5, order=2.0))
    curve = lambda e: RdpCurve.from_mapping({2.0: e})  # noqa: E731
    charge_together(
        [
            (a, Charge("m", rdp=curve(0.5), relation=Relation.RECORD)),
            (b, Charge("m", rdp=curve(0.9), relation=Relation.RECORD)),
        ]
    )
    with pytest.raises(BudgetExceededError, match="'b'"):
        charge_together(
            [
                (a, Charge("m", rdp=curve(0.1), relation=Relation.RECORD)),
                (b, Charge("m", rdp=curve(0.2), relation=Relation.RECORD)),
                (c, Charge("m", rdp=curve(0.1), relation=Relation.RECORD)),
            ]
        )
    assert (a.count(), b.count(), c.count()) == (1, 1, 0)
    assert a.spent().epsilon == 0.5
    other = PrivacyLedger(db, "other", Budget(1.0, 1e-5))
    with pytest.raises(AccountingError, match="family"):
        charge_together(
            [
                (a, Charge("m", epsilon=0.1, relation=Relation.RECORD)),
                (other, Charge("m", epsilon=0.1, relation=Relation.RECORD)),
            ]
        )


def test_flags_are_durable(db):
    ledger = PrivacyLedger(db, "f", Budget(1.0, 1e-5))
    assert ledger.flag("stop") is None
    ledger.set_flag("stop", "issued at query 7")
    ledger.set_flag("stop", "issued at query 8")
    assert PrivacyLedger(db, "f").flag("stop") == "issued at query 8"


def test_fits_and_require_fits_agree_with_charge(tmp_path):
    from privlm.accounting import Budget, Charge, PrivacyLedger
    from privlm.errors import BudgetExceededError

    led = PrivacyLedger(tmp_path / "f.db", "f", Budget(1.0, 1e-5))
    small, big = (
        Charge("a", epsilon=0.4, relation=Relation.RECORD),
        Charge("b", epsilon=1.5, relation=Relation.RECORD),
    )
    assert led.fits(small) and not led.fits(big)
    led.require_fits(small, "a small run")
    with pytest.raises(BudgetExceededError, match="refused before training: a big run"):
        led.require_fits(big, "a big run")
    with pytest.raises(BudgetExceededError):
        led.charge(big)  # the same verdict as the charge itself
    assert led.count() == 0


def test_an_overdraft_is_recorded_whole_and_refuses_everything_after_it(tmp_path):
    """A cost incurred under a bound since found too low is recorded as it is, over the
    budget; every later charge and up-front check is refused with the reason."""
    from privlm.accounting.ledger import OVERDRAWN_FLAG

    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(1.0, 1e-5))
    ledger.charge(Charge("first", epsilon=0.5, relation=Relation.RECORD))
    spent = ledger.record_overdraft(
        Charge("restated", epsilon=2.0, relation=Relation.RECORD), "tokens restated per unit"
    )
    assert spent.epsilon == pytest.approx(2.5) and ledger.count() == 2
    assert ledger.overdrawn() == "tokens restated per unit"
    with pytest.raises(BudgetExceededError, match="overdrawn: tokens restated per unit"):
        ledger.charge(Charge("later", epsilon=1e-9, relation=Relation.RECORD))
    with pytest.raises(BudgetExceededError, match="overdrawn: tokens restated per unit"):
        ledger.require_fits(
            Charge("planned", epsilon=1e-9, relation=Relation.RECORD), "a later job"
        )
    assert ledger.count() == 2 and ledger.remaining() == 0.0 and ledger.verify()
    assert ledger.to_json()["overdrawn"] == "tokens restated per unit"
    with pytest.raises(AccountingError, match="why"):
        ledger.record_overdraft(Charge("silent", epsilon=1.0, relation=Relation.RECORD), "")
    with ledger.transaction() as tx, pytest.raises(AccountingError):
        tx.set_flag(OVERDRAWN_FLAG, "cleared")


def test_a_ledger_composes_one_relation_and_refuses_another(tmp_path):
    """One figure is one promise: a per-unit ledger takes the unit of its first record- or
    user-level charge, composes per-unit charges of any mechanism, and refuses a charge of
    another relation (a user-level one, or SubMix's per part), recording nothing."""
    from privlm.accounting import Relation
    from privlm.accounting.ledger import RelationError

    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(8.0, 1e-5))
    assert ledger.relation() is Relation.UNIT
    ledger.charge(
        Charge("pmixed", epsilon=0.1, unit="unit of the dataset", relation=Relation.UNIT)
    )  # per unit
    ledger.charge(Charge("dpsgd", epsilon=0.1, unit="user", relation=Relation.USER))
    assert ledger.relation() is Relation.USER
    ledger.charge(Charge("pmixed", epsilon=0.1, relation=Relation.UNIT))
    for other in (Relation.RECORD, Relation.PART):
        with pytest.raises(RelationError, match=r"one figure\s+for two promises"):
            ledger.charge(Charge("x", epsilon=0.1, relation=other))
    assert ledger.count() == 3
    parts = PrivacyLedger(
        tmp_path / "l.db", "p", Budget(2.0, 1e-5, order=2.0), relation=Relation.PART
    )
    parts.charge(
        Charge("submix", rdp=RdpCurve.from_mapping({2.0: 0.1}), unit="part", relation=Relation.PART)
    )
    with pytest.raises(RelationError):
        parts.charge(Charge("dpsgd", epsilon=0.1, unit="record", relation=Relation.RECORD))
    with pytest.raises(RelationError, match="cannot be reopened"):
        PrivacyLedger(tmp_path / "l.db", "p", relation=Relation.RECORD)
    assert ledger.to_json()["relation"] == "add or remove one user (all their records)"


def test_a_ledger_from_before_relations_keeps_composing_what_it_did(tmp_path):
    from sqlalchemy import update

    from privlm.accounting.ledger import ledgers_table

    ledger = PrivacyLedger(tmp_path / "l.db", "old", Budget(8.0, 1e-5))
    with ledger._engine.begin() as conn:  # as the earlier version wrote it
        conn.execute(update(ledgers_table).values(relation="add or remove one privacy unit"))
    ledger.charge(Charge("dpsgd", epsilon=0.1, unit="record", relation=Relation.RECORD))
    ledger.charge(Charge("submix", epsilon=0.1, unit="part", relation=Relation.PART))
    assert ledger.relation() is None and ledger.count() == 2
