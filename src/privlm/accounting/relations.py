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

from collections.abc import Iterable
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

    @property
    def noun(self) -> str:
        """What a statement is "per": record, user, privacy unit or part."""
        return {"unit": "privacy unit"}.get(self.value, self.value)

    @classmethod
    def of_unit_kind(cls, kind: str) -> Relation:
        """The relation of data whose privacy unit is ``kind`` ("record" or "user", as
        :class:`privlm.data.Dataset` names it): nothing else is accepted."""
        if kind == "record":
            return cls.RECORD
        if kind == "user":
            return cls.USER
        raise ValueError(f"a privacy unit is a record or a user, not {kind!r}")

    @classmethod
    def parse(cls, text: str | Relation | None) -> Relation:
        """A relation from the free text charges stored before relations were recorded:
        ``record``, ``user``, anything about a part, else the data's unit. Legacy rows
        only: a charge carries its relation typed (:class:`privlm.accounting.Charge`)."""
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


def joint_relation(relations: Iterable[Relation]) -> Relation:
    """The one relation charges of ``relations`` compose under (``UNIT`` narrowed to the
    record or user any of them names); ``ValueError`` when two of them are different
    promises (a record and a user, or a part and a unit)."""
    joint: Relation | None = None
    for relation in relations:
        if joint is None:
            joint = relation
        elif not joint.accepts(relation):
            raise ValueError(
                f"charges per {joint.describe()} and per {relation.describe()} would state one "
                "figure for two promises"
            )
        else:
            joint = joint.narrowed(relation)
    if joint is None:
        raise ValueError("no relation: no charges")
    return joint


DESCRIPTIONS = {
    Relation.UNIT: "add or remove one privacy unit (a record, or a user where the data names "
    "users)",
    Relation.RECORD: "add or remove one record",
    Relation.USER: "add or remove one user (all their records)",
    Relation.PART: "remove one part of the ensemble (SubMix's operational privacy; not a "
    "per-unit figure)",
}
