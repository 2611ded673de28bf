"""Disjoint batches of privacy units, one per synthetic text, and each batch's members.

Amin et al. 2024 ("Private prediction for large-scale synthetic text generation", §3) use
each private example once: the data is split into disjoint batches, and one text is
generated from one batch, so a unit's loss is one batch's (parallel composition).

privlm places the units with the keyed hash of :mod:`privlm.data.partition`, never by
counting them: ``batch(u) = H(k₁, u) mod count_c`` among its class's ``count_c`` texts, and
``member(u) = H(k₂, u) mod M`` inside the batch (k₂ derived from k₁). The number of texts
and of members are public settings, so adding or removing one unit changes exactly one
member's records in exactly one batch, and nothing else: every other member, batch and text
is computed from the same records. That is the relation the per-unit PMixED bound is
proved for (one member replaced; docs/sharp_edges.md, "DP synthetic text").

A unit whose records carry several labels is in one batch per label (its records of class
c go to class c's batch): its loss composes over those batches, and the plan charges it.
"""

from __future__ import annotations

from dataclasses import dataclass

from privlm.data import Dataset
from privlm.data.partition import assign_parts, derive_key, unit_identities
from privlm.data.records import Record
from privlm.errors import PrivlmError


@dataclass(frozen=True)
class Batch:
    """One text's share of the data: its index, its class (None: unlabelled) and the records
    of each of its members (a member may have none: it is then the public model)."""

    index: int
    label: str | None
    members: tuple[tuple[Record, ...], ...]


def class_counts(count: int, labels: list[str] | None) -> list[tuple[str | None, int]]:
    """The texts per class: ``count`` split evenly over the declared labels, in their order
    (public: neither depends on the data), or all ``count`` unlabelled."""
    if not labels:
        return [(None, count)]
    if len(set(labels)) != len(labels):
        raise PrivlmError("each declared label must be given once")
    if count < len(labels):
        raise PrivlmError(f"{count} texts cannot cover the {len(labels)} declared labels")
    base, extra = divmod(count, len(labels))
    return [(label, base + (i < extra)) for i, label in enumerate(labels)]


def plan_batches(
    data: Dataset,
    count: int,
    members: int,
    key: str,
    labels: list[str] | None = None,
    counts: list[int] | None = None,
) -> list[Batch]:
    """Every text's batch, in output order (class by class). Records whose label is not
    declared are left out (a label set is public only when the user declares it).
    ``counts``: the texts of each label (or of the unlabelled data), when they come from a
    DP count rather than ``count`` split evenly."""
    names: list[str | None] = list(labels) if labels else [None]
    shares = (
        class_counts(count, labels) if counts is None else list(zip(names, counts, strict=True))
    )
    member_key = derive_key(key, "synth-members")
    identities = unit_identities(data)
    by_class: dict[str | None, list[tuple[str, Record]]] = {label: [] for label, _ in shares}
    for identity, record in zip(identities, data.records, strict=True):
        label = record.label if labels else None
        if label in by_class:
            by_class[label].append((identity, record))
    out: list[Batch] = []
    for label, n_texts in shares:
        rows = by_class[label]
        if n_texts < 1:
            continue  # the DP count allows this label no text: its records are left out
        # the label is part of the batch key, so a unit's records of two classes go to
        # batches placed independently
        ids = [f"{label}\x1f{identity}" if labels else identity for identity, _ in rows]
        texts = assign_parts(ids, n_texts, key)
        slots = assign_parts(ids, members, member_key)
        grid: list[list[list[Record]]] = [[[] for _ in range(members)] for _ in range(n_texts)]
        for (_, record), t, m in zip(rows, texts, slots, strict=True):
            grid[t][m].append(record)
        start = len(out)
        out.extend(
            Batch(start + i, label, tuple(tuple(m) for m in grid[i])) for i in range(n_texts)
        )
    return out


def public_batches(count: int, members: int, labels: list[str] | None = None) -> list[Batch]:
    """The batches of a run that reads no record (the no-reference baseline): the same
    texts per class as :func:`plan_batches`, every member without records."""
    empty: tuple[tuple[Record, ...], ...] = tuple(() for _ in range(members))
    shares = class_counts(count, labels)
    names = [label for label, n in shares for _ in range(n)]
    return [Batch(i, label, empty) for i, label in enumerate(names)]


def batches_per_unit(labels: list[str] | None, unit_kind: str) -> int:
    """How many batches one unit can be in: one, unless a user's records may carry several
    of the declared labels (a record has one label, so a record is always in one)."""
    if labels and unit_kind != "record":
        return len(labels)
    return 1


def unit_counts(data: Dataset, labels: list[str] | None) -> list[int]:
    """The exact number of units of each declared label (or of all the data): private,
    released only with noise (``auto_count``)."""
    if not labels:
        return [len(data.units())]
    return [len({r.unit for r in data.records if r.label == label}) for label in labels]
