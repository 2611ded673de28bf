"""Partitioning by privacy unit: disjoint, complete, unit-preserving, and
stable: removing one unit changes exactly one part, which sample-and-aggregate assumes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from privlm.data import Dataset, Record, partition_by_unit
from privlm.data.partition import derive_key, keyed_hash, new_partition_key
from privlm.errors import DataError

pytestmark = pytest.mark.fast

KEY = "0123456789abcdef0123456789abcdef"


def users_dataset(n_users=10, per_user=3):
    recs = [
        Record(f"u{u} r{i}", f"user-{u}", line=u * per_user + i)
        for u in range(n_users)
        for i in range(per_user)
    ]
    return Dataset(recs, "mem", "user")


def record_level(texts_labels: list[tuple[str, str | None]]) -> Dataset:
    """As a loader makes it: record-level units numbered by position."""
    return Dataset(
        [Record(t, f"record-{i}", lab, i + 1) for i, (t, lab) in enumerate(texts_labels)], "mem"
    )


def content(part: Dataset) -> Counter[tuple[str, str | None]]:
    """A part as a multiset of what a model trained on it sees."""
    return Counter((r.text, r.label) for r in part.records)


def changed_parts(before: list[Dataset], after: list[Dataset]) -> int:
    return sum(content(a) != content(b) for a, b in zip(before, after, strict=True))


def permutation_partition(ds: Dataset, n_parts: int, seed: int = 0) -> list[Dataset]:
    """privlm's old rule, kept here to show the property test catches it: units dealt
    round-robin from a random permutation whose length is the number of units."""
    units = ds.units()
    order = np.random.default_rng(seed).permutation(len(units))
    part_of = {units[u]: i % n_parts for i, u in enumerate(order)}
    buckets: list[list[Record]] = [[] for _ in range(n_parts)]
    for r in ds.records:
        buckets[part_of[r.unit]].append(r)
    return [Dataset(b, "mem", ds.unit_kind) for b in buckets]


def test_parts_are_disjoint_complete_and_keep_users_whole():
    ds = users_dataset(40, 3)
    parts = partition_by_unit(ds, 4, KEY)
    assert len(parts) == 4
    seen = [r for p in parts for r in p]
    assert sorted(r.text for r in seen) == sorted(r.text for r in ds)
    unit_sets = [set(p.units()) for p in parts]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not unit_sets[i] & unit_sets[j]
    for p in parts:  # a user's records all land in one part
        for u in p.units():
            assert sum(r.unit == u for r in p) == 3


def test_same_key_same_parts_other_key_other_parts():
    ds = users_dataset(50, 1)
    a = [p.units() for p in partition_by_unit(ds, 5, KEY)]
    b = [p.units() for p in partition_by_unit(ds, 5, KEY)]
    c = [p.units() for p in partition_by_unit(ds, 5, new_partition_key())]
    assert a == b and a != c


@pytest.mark.parametrize("trial", range(6))
def test_removing_any_user_changes_exactly_one_part(trial):
    rng = np.random.default_rng(trial)
    n_users, n_parts = int(rng.integers(20, 120)), int(rng.integers(2, 9))
    recs = [
        Record(f"user {u} says {int(rng.integers(1000))}", f"user-{u}")
        for u in range(n_users)
        for _ in range(int(rng.integers(1, 4)))
    ]
    ds = Dataset(recs, "mem", "user")
    key = new_partition_key()
    before = partition_by_unit(ds, n_parts, key)
    for gone in ds.units():
        smaller = Dataset([r for r in recs if r.unit != gone], "mem", "user")
        assert changed_parts(before, partition_by_unit(smaller, n_parts, key)) == 1


@pytest.mark.parametrize("trial", range(4))
def test_removing_any_record_changes_exactly_one_part_even_with_duplicates(trial):
    """Record-level units are renumbered when a record is removed (``record-N`` shifts);
    the identity is the content, so one part changes, even for a duplicated record."""
    rng = np.random.default_rng(100 + trial)
    rows = [(f"text {int(rng.integers(15))}", str(int(rng.integers(2)))) for _ in range(60)]
    assert len(set(rows)) < len(rows)  # duplicates present
    key = new_partition_key()
    before = partition_by_unit(record_level(rows), 5, key)
    for i in range(len(rows)):
        after = partition_by_unit(record_level(rows[:i] + rows[i + 1 :]), 5, key)
        assert changed_parts(before, after) == 1


def test_the_old_permutation_rule_fails_the_property():
    """The check above has teeth: the round-robin deal moves many units per removal."""
    ds = users_dataset(100, 1)
    before = permutation_partition(ds, 8)
    worst = 0
    for gone in ds.units()[:10]:
        smaller = Dataset([r for r in ds.records if r.unit != gone], "mem", "user")
        worst = max(worst, changed_parts(before, permutation_partition(smaller, 8)))
    assert worst > 1


def test_parts_are_balanced_in_expectation():
    ds = users_dataset(8000, 1)
    sizes = [len(p) for p in partition_by_unit(ds, 8, new_partition_key())]
    # multinomial(8000, 1/8): sd ≈ 30; 6 sd either side
    assert all(abs(s - 1000) < 180 for s in sizes), sizes


def test_keyed_hash_and_derived_keys():
    assert keyed_hash(KEY, "user-1") == keyed_hash(KEY, "user-1")
    assert keyed_hash(KEY, "user-1") != keyed_hash(derive_key(KEY, "halves-0"), "user-1")
    with pytest.raises(DataError, match="must be hex"):
        keyed_hash("not hex", "user-1")


def test_refuses_more_parts_than_units():
    with pytest.raises(DataError, match="cannot split 10 privacy units"):
        partition_by_unit(users_dataset(10, 5), 11, KEY)
    with pytest.raises(DataError, match="positive integer"):
        partition_by_unit(users_dataset(), 0, KEY)


def test_a_nested_split_may_leave_parts_empty():
    one = users_dataset(1, 3)
    halves = partition_by_unit(one, 2, KEY, fewer_units_ok=True)
    assert sorted(len(h) for h in halves) == [0, 3]
