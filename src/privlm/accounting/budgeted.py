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

A mechanism's entry point follows one shape, ``train_x(model, data, out_dir, config, *,
ledger=None, progress=True)``, and uses this class for steps 2 and 4, so a new mechanism
has a template to copy (``privlm.training.dpsgd.train_dpsgd`` is the shortest). Private
prediction charges token by token through the same ledger (``privlm.predict``), where each
token is its own plan, check and charge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from privlm.accounting.ledger import Charge, PrivacyLedger
from privlm.errors import AccountingError

T = TypeVar("T")


@dataclass
class BudgetedRun:
    """A run whose ``planned`` charges have been checked against ``ledger`` (None: a run
    without a ledger, whose statement is still computed and written)."""

    ledger: PrivacyLedger | None
    what: str
    planned: tuple[Charge, ...]
    charged: list[Charge] = field(default_factory=list)

    @classmethod
    def start(cls, ledger: PrivacyLedger | None, what: str, *planned: Charge) -> BudgetedRun:
        """Check that everything ``what`` will charge fits the ledger's budget, together."""
        run = cls(ledger, what, tuple(planned))
        if ledger is not None and planned:
            ledger.require_fits(run._together(), what)
        return run

    def _together(self) -> Charge:
        """The planned charges as one: the charge itself when there is one (so a PLD charge
        is checked by PLD), else the sum of their RDP curves."""
        if len(self.planned) == 1:
            return self.planned[0]
        first = self.planned[0].rdp
        if first is not None and all(c.rdp is first for c in self.planned):  # k of one charge
            return Charge(self.what, rdp=first.times(len(self.planned)), unit=self.planned[0].unit)
        curves = [c.rdp for c in self.planned if c.rdp is not None]
        if len(curves) != len(self.planned):
            raise AccountingError(f"{self.what}: each part of a multi-part run needs an RDP curve")
        total = curves[0]
        for curve in curves[1:]:
            total = total + curve
        return Charge(self.what, rdp=total, unit=self.planned[0].unit)

    def release(self, charge: Charge, write: Callable[[], T]) -> T:
        """Record ``charge`` durably, then run ``write`` (which releases the result). The
        charge must be one of the run's planned charges, each charged once."""
        if not any(charge is c for c in self.planned):
            raise AccountingError(f"{self.what}: {charge.mechanism!r} was not planned")
        if any(charge is c for c in self.charged):
            raise AccountingError(f"{self.what}: {charge.mechanism!r} was already charged")
        if self.ledger is not None:
            self.ledger.charge(charge)  # durable; raises (nothing written) if it no longer fits
        self.charged.append(charge)
        return write()
