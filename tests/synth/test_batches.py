"""One unit added or removed changes one member of one batch, and nothing else
(docs/sharp_edges.md, "DP synthetic text", step 1)."""

from __future__ import annotations

import pytest

from privlm.data.records import Dataset, Record
from privlm.errors import PrivlmError
from privlm.synth.batches import batches_per_unit, class_counts, plan_batches

pytestmark = pytest.mark.fast
KEY = "0f" * 16


def records(n: int, labelled: bool = True) -> list[Record]:
    return [
        Record(f"text {i}", f"r{i}", ("pos" if i % 3 else "neg") if labelled else None)
        for i in range(n)
    ]


def differences(a: list, b: list) -> list[tuple[int, int]]:
    """(batch, member) pairs whose records differ."""
    assert [x.index for x in a] == [x.index for x in b]
    return [
        (x.index, m)
        for x, y in zip(a, b, strict=True)
        for m, (ra, rb) in enumerate(zip(x.members, y.members, strict=True))
        if ra != rb
    ]


@pytest.mark.parametrize("removed", [0, 7, 18, 29])
def test_removing_one_record_changes_one_member_of_one_batch(removed):
    full = records(30)
    d = Dataset(full, "mem")
    d2 = Dataset(full[:removed] + full[removed + 1 :], "mem")
    a = plan_batches(d, 6, 4, KEY, ["neg", "pos"])
    b = plan_batches(d2, 6, 4, KEY, ["neg", "pos"])
    changed = differences(a, b)
    assert len(changed) == 1
    batch, member = changed[0]
    assert full[removed] in a[batch].members[member]
    assert a[batch].label == full[removed].label  # a record is only in its label's batches


def test_every_record_of_a_declared_label_is_in_exactly_one_member():
    d = Dataset([*records(40), Record("odd", "x", "other")], "mem")
    batches = plan_batches(d, 5, 3, KEY, ["neg", "pos"])
    placed = [r for b in batches for m in b.members for r in m]
    assert sorted(r.text for r in placed) == sorted(r.text for r in d.records if r.label != "other")
    assert [b.label for b in batches] == ["neg", "neg", "neg", "pos", "pos"]  # 5 split evenly


def test_a_user_with_two_labels_is_in_one_batch_per_label_and_charged_for_both():
    recs = [Record("a", "alice", "neg"), Record("b", "alice", "pos")] + [
        Record(f"t{i}", f"u{i}", "pos" if i % 2 else "neg") for i in range(20)
    ]
    d = Dataset(recs, "mem", "user")
    d2 = Dataset(recs[2:], "mem", "user")
    changed = differences(
        plan_batches(d, 4, 3, KEY, ["neg", "pos"]), plan_batches(d2, 4, 3, KEY, ["neg", "pos"])
    )
    assert len(changed) == 2 and len({b for b, _ in changed}) == 2
    assert batches_per_unit(["neg", "pos"], "user") == 2
    assert batches_per_unit(["neg", "pos"], "record") == 1
    assert batches_per_unit(None, "user") == 1


def test_a_users_records_of_one_label_stay_together():
    recs = [Record(f"{u}-{i}", u, None) for u in ("ann", "bob", "cy") for i in range(4)]
    for b in plan_batches(Dataset(recs, "mem", "user"), 3, 2, KEY):
        for m in b.members:
            assert len({r.unit for r in m}) <= 3
            for r in m:  # all of r's user's records are in this member
                assert sum(x.unit == r.unit for x in m) == 4


def test_the_counts_per_label_are_public_and_checked():
    assert class_counts(7, ["a", "b", "c"]) == [("a", 3), ("b", 2), ("c", 2)]
    assert class_counts(7, None) == [(None, 7)]
    with pytest.raises(PrivlmError, match="cannot cover"):
        class_counts(2, ["a", "b", "c"])
    with pytest.raises(PrivlmError, match="once"):
        class_counts(4, ["a", "a"])
