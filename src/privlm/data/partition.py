"""Split a dataset into disjoint parts by privacy unit, stably.

The sample-and-aggregate protocols (PMixED, SubMix, PromptPATE) fine-tune one model, or
build one teacher, per part. Their guarantee assumes that neighbouring datasets (one unit
added or removed) differ in **one part only**. For GNMax this is the sensitivity claim
itself: a neighbour changes at most one teacher's vote.

So a unit's part is a function of that unit's identity alone, never of the other units:

    part(u) = HMAC-SHA256(key, identity(u)) mod n_parts

A shuffled round-robin deal (what privlm did before) fails this: the permutation depends on
how many units there are, so removing one unit moves many others. With a keyed hash, adding
or removing a unit changes only that unit's part, and every part has n/n_parts units in
expectation (a multinomial split; a part can be empty when there are few units per part).

The identity of a unit is its user id when the data has one. A record-level unit has no
id that survives the removal of another record (its row number shifts), so its identity is
its content (text, label and other fields) plus its occurrence number among identical
records: removing one of several identical records then changes one part's multiset of
records, whichever copy was removed.

The key is not secret: the assignment only has to be independent of the other units. It
must be chosen without looking at the data (a fresh random key per ensemble, by default),
and is recorded in the ensemble's manifest so that a resume reproduces the same parts.

>>> from privlm.data.records import Record
>>> ds = Dataset([Record(f"r{i}", f"user-{i % 7}") for i in range(21)], "mem", "user")
>>> parts = partition_by_unit(ds, 3, key="00")
>>> sorted(len(p.units()) for p in parts) == sorted(len(p.units()) for p in partition_by_unit(ds, 3, key="00"))
True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections import Counter

from privlm.data.records import Dataset, Record
from privlm.errors import DataError

KEY_BYTES = 16


def new_partition_key() -> str:
    """A fresh random key (hex), chosen without looking at any data."""
    return secrets.token_hex(KEY_BYTES)


def derive_key(key: str, purpose: str) -> str:
    """A key for a nested split (e.g. SubMix's halves of part 3), independent of the first."""
    return hmac.new(bytes.fromhex(key), purpose.encode(), hashlib.sha256).hexdigest()


def keyed_hash(key: str, identity: str) -> int:
    """A 64-bit keyed hash of ``identity`` (HMAC-SHA256)."""
    try:
        raw = bytes.fromhex(key)
    except ValueError:
        raise DataError("partition key", f"a partition key must be hex, got {key!r}") from None
    return int.from_bytes(hmac.new(raw, identity.encode(), hashlib.sha256).digest()[:8], "big")


def record_identities(records: list[Record]) -> list[str]:
    """For record-level units: each record's content plus its occurrence number among
    records with the same content (independent of every other record's position)."""
    seen: Counter[str] = Counter()
    out = []
    for r in records:
        content = json.dumps([r.text, r.label, sorted(r.fields.items())], ensure_ascii=False)
        out.append(f"{content}#{seen[content]}")
        seen[content] += 1
    return out


def unit_identities(dataset: Dataset) -> list[str]:
    """The identity of each record's privacy unit, in record order."""
    if dataset.unit_kind == "record":
        return record_identities(dataset.records)
    return [r.unit for r in dataset.records]


def assign_parts(identities: list[str], n_parts: int, key: str) -> list[int]:
    """The part of each identity: its keyed hash modulo ``n_parts``."""
    return [keyed_hash(key, i) % n_parts for i in identities]


def _check_parts(dataset: Dataset, n_parts: int, fewer_units_ok: bool) -> None:
    if isinstance(n_parts, bool) or int(n_parts) != n_parts or n_parts < 1:
        raise DataError(
            dataset.source, f"the number of parts must be a positive integer, got {n_parts!r}"
        )
    units = len(dataset.units())
    if n_parts > units and not fewer_units_ok:
        raise DataError(
            dataset.source,
            f"cannot split {units} privacy units ({dataset.unit_kind}s) into {n_parts} "
            "parts; use fewer parts or more data",
        )


def partition_by_unit(
    dataset: Dataset, n_parts: int, key: str, *, fewer_units_ok: bool = False
) -> list[Dataset]:
    """``n_parts`` disjoint datasets of whole units, each unit placed by its keyed hash.

    A part may be empty when units are few per part; callers decide what an empty part
    means (an ensemble member equal to the public model, a teacher that abstains). More parts
    than units is refused unless ``fewer_units_ok`` (a nested split, e.g. SubMix's halves)."""
    _check_parts(dataset, n_parts, fewer_units_ok)
    buckets: list[list[Record]] = [[] for _ in range(n_parts)]
    for r, part in zip(
        dataset.records, assign_parts(unit_identities(dataset), n_parts, key), strict=True
    ):
        buckets[part].append(r)
    return [
        Dataset(b, f"{dataset.source}#part{i}of{n_parts}", dataset.unit_kind)
        for i, b in enumerate(buckets)
    ]
