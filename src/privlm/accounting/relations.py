"""Neighbouring relations, named (as dp-accounting's ``NeighboringRelation``): what one
privacy statement promises to hide, and so which charges may be composed into one figure.

- ``UNIT``: add or remove one privacy unit, whichever the data names: a record, or a user
  (all their records) where the data has user ids. A mechanism that follows the data's unit
  (DP-SGD, PMixED's keyed-hash ensembles, PromptPATE's teachers) is charged per ``UNIT``.
- ``RECORD`` and ``USER``: the same, with the unit stated (a run that chose one).
- ``PART``: remove one part of an ensemble: SubMix's operational privacy, which bounds no
  single unit.

How one unit acts inside a mechanism is part of its proof, not of the relation: in privlm's
fixed-size keyed-hash ensemble, adding or removing one unit *replaces* one member's model
(docs/sharp_edges.md, "PMixED per unit"), and the charge is still per ``UNIT``.

A ledger holds one relation. A per-unit ledger accepts ``UNIT`` charges, and ``RECORD`` or
``USER`` charges of one kind only: its first such charge fixes which. A charge of another
relation is refused, recording nothing: composing it would state one figure for two
promises (:class:`privlm.accounting.ledger.PrivacyLedger`).
"""

from __future__ import annotations

from enum import Enum


class Relation(Enum):
    UNIT = "unit"
    RECORD = "record"
    USER = "user"
    PART = "part"

    def describe(self) -> str:
        return DESCRIPTIONS[self]

    @property
    def per_unit(self) -> bool:
        return self is not Relation.PART

    @classmethod
    def parse(cls, text: str | Relation | None) -> Relation:
        """A relation from its name, or from the free text older ledgers stored: ``record``,
        ``user``, anything about a part, else the data's unit."""
        if isinstance(text, Relation):
            return text
        words = (text or "").strip().lower()
        for relation in cls:
            if words == relation.value:
                return relation
        if words.startswith("part") or "a part removed" in words:
            return cls.PART
        if words.startswith("user"):
            return cls.USER
        return cls.UNIT

    def accepts(self, charge: Relation) -> bool:
        """Whether a ledger of this relation may compose ``charge``'s."""
        if self is Relation.PART or charge is Relation.PART:
            return self is charge
        return self is Relation.UNIT or charge is Relation.UNIT or self is charge

    def narrowed(self, charge: Relation) -> Relation:
        """This ledger's relation once ``charge`` is composed: a ``UNIT`` ledger takes the
        unit of its first ``RECORD`` or ``USER`` charge."""
        return charge if self is Relation.UNIT and charge is not Relation.UNIT else self


DESCRIPTIONS = {
    Relation.UNIT: "add or remove one privacy unit (a record, or a user where the data names "
    "users)",
    Relation.RECORD: "add or remove one record",
    Relation.USER: "add or remove one user (all their records)",
    Relation.PART: "remove one part of the ensemble (SubMix's operational privacy; not a "
    "per-unit figure)",
}
