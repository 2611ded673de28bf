"""Split a dataset into disjoint parts by privacy unit.

The sample-and-aggregate protocols (PMixED, SubMix, PromptPATE) fine-tune one model per
part; their guarantee assumes that removing one unit changes one part only. So parts are
made of whole units: a user's records all land in the same part.
"""

from __future__ import annotations

import numpy as np

from privlm.data.records import Dataset
from privlm.errors import DataError


def partition_by_unit(dataset: Dataset, n_parts: int, seed: int = 0) -> list[Dataset]:
    """``n_parts`` disjoint datasets; units shuffled with ``seed`` and dealt round-robin."""
    if int(n_parts) != n_parts or n_parts < 1:
        raise DataError(
            dataset.source, f"the number of parts must be a positive integer, got {n_parts!r}"
        )
    units = dataset.units()
    if n_parts > len(units):
        raise DataError(
            dataset.source,
            f"cannot split {len(units)} privacy units ({dataset.unit_kind}s) into {n_parts} "
            "non-empty parts; use fewer parts or more data",
        )
    order = np.random.default_rng(seed).permutation(len(units))
    part_of = {units[u]: i % n_parts for i, u in enumerate(order)}
    buckets: list[list] = [[] for _ in range(n_parts)]
    for r in dataset.records:
        buckets[part_of[r.unit]].append(r)
    return [
        Dataset(b, f"{dataset.source}#part{i}of{n_parts}", dataset.unit_kind)
        for i, b in enumerate(buckets)
    ]
