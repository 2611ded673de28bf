"""A release's guarantee as a function of the charges it recorded, never restated from its
settings: (ε, δ) composed as the ledger composes them (:mod:`privlm.accounting.composition`)
and the relation the charges carry.

A setting says what was *asked* (ε = 8); only the charge says what one unit's change can
cost (one user in several texts pays for each of them). So every statement privlm writes
beside a release reads its figure from here: from the planned charges before a run (the
same ones the ledger then records), or from the ledger's records of the run.

>>> from privlm.accounting import Charge, RdpCurve, Relation
>>> curve = RdpCurve.from_mapping({2.0: 0.5, 4.0: 1.0, 8.0: 2.0})
>>> one = Charge("demo", rdp=curve, relation=Relation.USER)
>>> g = guarantee_of([one, one], 1e-5)
>>> g.text
'(5.088, 1e-05)-DP per user'
>>> round(g.epsilon, 3) == round(guarantee_of([Charge("demo", rdp=curve.times(2),
...     relation=Relation.USER)], 1e-5).epsilon, 3)
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privlm.accounting.analysis.conversion import check_delta
from privlm.accounting.composition import PldPart, composed_spent
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.accounting.relations import Relation, joint_relation
from privlm.errors import AccountingError

if TYPE_CHECKING:  # annotations only: the ledger (SQLAlchemy) loads where one is used
    from privlm.accounting.ledger import Charge, ChargeRecord, PrivacyLedger


def pair_text(epsilon: float, delta: float) -> str:
    """ "(ε, δ)" as every privlm statement writes it: ε to four significant digits, δ to
    three. The one place a figure becomes text, so the CLI, the files, the API answers and
    the model cards cannot round one charge two ways."""
    return f"({epsilon:.4g}, {delta:.3g})"


def guarantee_text(epsilon: float, delta: float, per: str | None = None, kind: str = "DP") -> str:
    """ "(ε, δ)-DP per <per>" (or ``kind`` "SDP", or no "per" when ``per`` is None) from
    figures read off recorded charges (:func:`guarantee_of`, :func:`recorded_guarantee`)."""
    text = f"{pair_text(epsilon, delta)}-{kind}"
    return text if per is None else f"{text} per {per}"


@dataclass(frozen=True)
class Guarantee:
    """(ε, δ) per ``relation``, the Rényi order that gave it (None: none did) and the
    composition ("rdp", "pld" or "pld+rdp")."""

    epsilon: float
    delta: float
    relation: Relation
    order: float | None = None
    method: str = "rdp"

    @property
    def text(self) -> str:
        return guarantee_text(self.epsilon, self.delta, self.relation.noun)

    def to_dict(self) -> dict[str, Any]:
        return {
            "guarantee": self.text,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "per": self.relation.noun,
            "relation": self.relation.describe(),
        }


def _relation(relations: Sequence[Relation]) -> Relation:
    try:
        return joint_relation(relations)
    except ValueError as exc:
        raise AccountingError(f"no one statement covers these charges: {exc}") from None


def guarantee_of(
    charges: Sequence[Charge], delta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> Guarantee:
    """What ``charges`` cost together at δ: their RDP curves summed on ``orders`` and the
    events charged by PLD composed by PLD, the tighter reported, as a ledger of that grid
    holding exactly these charges reports it."""
    d = check_delta(delta)
    grid = tuple(float(a) for a in orders)
    rdp = np.zeros(len(grid))
    rest = np.zeros(len(grid))
    events = []
    for charge in charges:
        at = np.zeros(len(grid)) if charge.rdp is None else charge.rdp.at(grid)
        rdp = rdp + at
        if charge.compose == "pld" and charge.event is not None:
            events.append(charge.event)
        else:
            rest = rest + at
    pld = PldPart(tuple(events), rest) if events else None
    eps = sum(c.epsilon for c in charges)
    dlt = sum(c.delta for c in charges)
    spent = composed_spent(grid, rdp, eps, dlt, d, pld)
    relation = _relation([c.relation for c in charges])
    return Guarantee(spent.epsilon, spent.delta, relation, spent.order, spent.method)


def recorded_guarantee(
    ledger: PrivacyLedger, where: Callable[[ChargeRecord], bool], delta: float | None = None
) -> Guarantee:
    """What the charges ``where`` selects on ``ledger`` cost together (e.g. one run's),
    composed as the ledger composes them."""
    return guarantee_of_records(ledger, [r for r in ledger.charges() if where(r)], delta)


def guarantee_of_records(
    ledger: PrivacyLedger, records: Sequence[ChargeRecord], delta: float | None = None
) -> Guarantee:
    """What ``records``, read from ``ledger``, cost together, composed as the ledger
    composes them (for a caller that has read them already)."""
    if not records:
        raise AccountingError(f"ledger {ledger.name!r} records no such charge")
    spent = ledger.spent_of(records, delta)
    relation = _relation([r.relation for r in records])
    return Guarantee(spent.epsilon, spent.delta, relation, spent.order, spent.method)
