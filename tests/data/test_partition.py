"""Partitioning by privacy unit: disjoint, complete, unit-preserving, seeded."""

from __future__ import annotations

import pytest

from privlm.data import Dataset, Record, partition_by_unit
from privlm.errors import DataError


def users_dataset(n_users=10, per_user=3):
    recs = [
        Record(f"u{u} r{i}", f"user-{u}", line=u * per_user + i)
        for u in range(n_users)
        for i in range(per_user)
    ]
    return Dataset(recs, "mem", "user")


def test_parts_are_disjoint_complete_and_keep_users_whole():
    ds = users_dataset()
    parts = partition_by_unit(ds, 4, seed=1)
    assert len(parts) == 4
    seen = [r for p in parts for r in p]
    assert sorted(r.text for r in seen) == sorted(r.text for r in ds)
    unit_sets = [set(p.units()) for p in parts]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not unit_sets[i] & unit_sets[j]
    assert all(len(p) > 0 for p in parts)
    assert sorted(len(p.units()) for p in parts) == [2, 2, 3, 3]


def test_seeded_and_seed_sensitive():
    ds = users_dataset(50, 1)
    a = [p.units() for p in partition_by_unit(ds, 5, seed=3)]
    b = [p.units() for p in partition_by_unit(ds, 5, seed=3)]
    c = [p.units() for p in partition_by_unit(ds, 5, seed=4)]
    assert a == b and a != c


def test_refuses_more_parts_than_units():
    with pytest.raises(DataError, match="cannot split 10 privacy units"):
        partition_by_unit(users_dataset(10, 5), 11)
    with pytest.raises(DataError, match="positive integer"):
        partition_by_unit(users_dataset(), 0)
