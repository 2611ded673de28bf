"""The one path every private mechanism takes: plan → check → run → charge → release.

1. **Plan.** Before it touches the data, a mechanism states what it will cost, as the
   :class:`~privlm.accounting.ledger.Charge` (or charges) its settings and the public sizes
   determine (DP-SGD: σ, q and steps; JFT: phase 2, and phase 1 in light-noise mode).
2. **Check.** :meth:`BudgetedRun.start` asks the ledger whether they fit *together*, and
   refuses, naming the run, before any work when they do not.
3. **Run.** The mechanism trains or answers; nothing leaves.
4. **Charge, then release.** :meth:`BudgetedRun.release` records a planned charge durably
   and only then writes the result. If the ledger refuses it then (another run spent the
   budget meanwhile), nothing is written, and the error says why.

**Resumed, never charged twice.** Through a ledger tagged with a job
(:meth:`~privlm.accounting.ledger.PrivacyLedger.tagged`, as the service tags every job's
charges), each planned charge is recorded with its step (``"<what>#<i>"``). A job that
is interrupted and started again finds the steps it already charged: they are neither
checked again nor charged again, and the run releases their results under those
charges. This is sound because an interrupted job released nothing: a charge whose draw
never left pays for the one draw that does (the restart's).

A mechanism's entry point follows one shape, ``train_x(model, data, out_dir, config, *,
ledger=None, progress=True)``, and uses this class for steps 2 and 4, so a new mechanism
has a template to copy (``privlm.training.dpsgd.train_dpsgd`` is the shortest). Private
prediction charges token by token through the same ledger (``privlm.predict``), where each
token is its own plan, check and charge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from privlm.accounting.ledger import Charge, ChargeRecord, PrivacyLedger, RelationError
from privlm.accounting.relations import joint_relation
from privlm.errors import AccountingError

T = TypeVar("T")

STEP = "budgeted_step"  # a job's charge's params: which planned charge of which run it is


def _step(what: str, index: int) -> str:
    return f"{what}#{index}"


def recorded_steps(ledger: PrivacyLedger | None, what: str) -> dict[int, ChargeRecord]:
    """The planned charges of ``what`` that the ledger's job already recorded, by index
    (empty for a ledger with no job tag: every run of the library is a new release)."""
    job = None if ledger is None else ledger.tags.get("job")
    if ledger is None or job is None:
        return {}
    prefix = _step(what, 0)[:-1]
    found: dict[int, ChargeRecord] = {}
    for record in ledger.charges():
        step = record.params.get(STEP)
        if record.params.get("job") == job and isinstance(step, str) and step.startswith(prefix):
            found[int(step[len(prefix) :])] = record
    return found


def _same_cost(record: ChargeRecord, charge: Charge, orders: Sequence[float]) -> bool:
    """Whether ``record`` is ``charge`` as recorded: the same mechanism, relation and cost."""
    if record.mechanism != charge.mechanism or record.relation is not charge.relation:
        return False
    if (record.rdp is None) != (charge.rdp is None):
        return False
    if charge.rdp is not None and record.rdp is not None:
        planned = charge.rdp.at(tuple(orders))
        if not np.allclose(record.rdp, planned, rtol=1e-9, atol=0, equal_nan=True):
            return False
    return bool(
        np.isclose(record.epsilon, charge.epsilon) and np.isclose(record.delta, charge.delta)
    )


@dataclass
class BudgetedRun:
    """A run whose ``planned`` charges have been checked against ``ledger`` (None: a run
    without a ledger, whose statement is still computed and written)."""

    ledger: PrivacyLedger | None
    what: str
    planned: tuple[Charge, ...]
    charged: list[Charge] = field(default_factory=list)
    paid: frozenset[int] = frozenset()  # planned charges its job recorded before a restart

    @classmethod
    def start(cls, ledger: PrivacyLedger | None, what: str, *planned: Charge) -> BudgetedRun:
        """Check that everything ``what`` will charge fits the ledger's budget, together
        (what its job already charged before an interruption is not charged again)."""
        paid = cls._paid(ledger, what, planned)
        run = cls(ledger, what, tuple(planned), paid=paid)
        unpaid = [c for i, c in enumerate(planned) if i not in paid]
        if ledger is not None and unpaid:
            ledger.require_fits(run._together(unpaid), what)
        return run

    @staticmethod
    def _paid(ledger: PrivacyLedger | None, what: str, planned: Sequence[Charge]) -> frozenset[int]:
        """The indices of ``planned`` its job recorded already; refused when a recorded
        step is not the planned charge (the job's plan changed: nothing is assumed)."""
        found = recorded_steps(ledger, what)
        if not found:
            return frozenset()
        assert ledger is not None
        for index, record in found.items():
            if index >= len(planned) or not _same_cost(record, planned[index], ledger.orders):
                raise AccountingError(
                    f"{what}: this job's recorded charge {index} is not the one it plans now; "
                    "refused rather than guess what it paid for"
                )
        return frozenset(found)

    def _together(self, planned: Sequence[Charge] | None = None) -> Charge:
        """``planned`` charges (default: the run's) as one: the charge itself when there is one (so a PLD charge
        is checked by PLD), else the sum of their RDP curves, under their one relation
        (refused, before any work, when they are of two)."""
        planned = self.planned if planned is None else planned
        if len(planned) == 1:
            return planned[0]
        try:
            relation = joint_relation(c.relation for c in planned)
        except ValueError as exc:
            raise RelationError(f"refused before any work ({self.what}): {exc}") from None
        unit = planned[0].unit
        first = planned[0].rdp
        if first is not None and all(c.rdp is first for c in planned):  # k of one charge
            return Charge(self.what, rdp=first.times(len(planned)), unit=unit, relation=relation)
        curves = [c.rdp for c in planned if c.rdp is not None]
        if len(curves) != len(planned):
            raise AccountingError(f"{self.what}: each part of a multi-part run needs an RDP curve")
        total = curves[0]
        for curve in curves[1:]:
            total = total + curve
        return Charge(self.what, rdp=total, unit=unit, relation=relation)

    def release(self, charge: Charge, write: Callable[[], T]) -> T:
        """Record ``charge`` durably, then run ``write`` (which releases the result). The
        charge must be one of the run's planned charges, each charged once."""
        index = next((i for i, c in enumerate(self.planned) if charge is c), None)
        if index is None:
            raise AccountingError(f"{self.what}: {charge.mechanism!r} was not planned")
        if any(charge is c for c in self.charged):
            raise AccountingError(f"{self.what}: {charge.mechanism!r} was already charged")
        if self.ledger is not None and index not in self.paid:
            self.ledger.charge(self._stepped(charge, index))  # durable; raises if no longer fits
        self.charged.append(charge)
        return write()

    def _stepped(self, charge: Charge, index: int) -> Charge:
        """``charge`` with its step, where the ledger is a job's (so a restart finds it)."""
        if self.ledger is None or "job" not in self.ledger.tags:
            return charge
        return replace(charge, params={**charge.params, STEP: _step(self.what, index)})
