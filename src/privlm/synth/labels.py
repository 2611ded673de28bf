"""The declared label set of a synthetic dataset, checked against the data before any
charge and before any model loads (docs/sharp_edges.md, "DP synthetic text": the label set
is declared public, never read off the data)."""

from __future__ import annotations

from privlm.data import Dataset
from privlm.errors import PrivlmError


def declared_labels(data: Dataset, labels: list[str] | None) -> list[str] | None:
    """The declared label set, checked against the data before any charge: each label once
    and not empty, labels only on labelled data, every declared label held by some record
    (else its texts would come from the public model alone), and a label set declared
    whenever the data has labels. Refusals go to the curator, before any work."""
    present = {r.label for r in data.records if r.label is not None}
    if not labels:
        if present:
            raise PrivlmError(
                "the data has labels: declare the label set public (CLI: --labels A,B,…; "
                "service: params.labels). Texts are generated per declared label; a label set "
                "read off the data would not be private"
            )
        return None
    if any(not str(label).strip() for label in labels):
        raise PrivlmError("a declared label is empty")
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        raise PrivlmError(f"each declared label must be given once; repeated: {repeated}")
    if not present:
        raise PrivlmError(
            "labels were declared but the data has none: its texts would be generated from no "
            "record; drop the labels, or give data with a label column"
        )
    missing = [x for x in labels if x not in present]
    if missing:
        raise PrivlmError(
            f"no record has the declared label(s) {missing}: their texts would come from the "
            "public model alone; declare only labels the data uses"
        )
    return list(labels)
