"""PMixED's bounds, the relation each is proved for, and its order α: names only, no NumPy,
so the settings' modules (``privlm.predict.config``) and ``--help`` read them without loading
the analysis (:mod:`privlm.accounting.analysis.pmixed`, which re-exports them; PMixED paper,
``shared/papers/000``, Eq. 12; docs/sharp_edges.md)."""

from __future__ import annotations

from privlm.errors import AccountingError


def check_alpha(alpha: float) -> int:
    """PMixED's order α must be an integer ≥ 2 (Eq. 12 needs integer orders)."""
    if alpha != int(alpha) or alpha < 2:
        raise AccountingError(f"PMixED's order α must be an integer ≥ 2, got {alpha!r}")
    return int(alpha)


REPLACEMENT = "replacement"
PER_UNIT_BOUNDS = (REPLACEMENT,)
PER_PART_BOUNDS = ("expansion", "jensen")
BOUNDS = PER_UNIT_BOUNDS + PER_PART_BOUNDS
DEFAULT_BOUND = REPLACEMENT
RELATIONS = {
    REPLACEMENT: "per unit: one member's model replaced (one unit changes one part's data)",
    "expansion": "per part: one member added or removed (the paper's relation, not per unit)",
    "jensen": "per part: one member added or removed (the paper's relation, not per unit)",
}


def check_bound(bound: str) -> str:
    if bound not in BOUNDS:
        raise AccountingError(f"unknown PMixED bound {bound!r}; choose from {BOUNDS}")
    return bound


def relation(bound: str) -> str:
    """The neighbouring relation a bound's curve is proved for (docs/sharp_edges.md)."""
    return RELATIONS[check_bound(bound)]


def is_per_unit(bound: str) -> bool:
    """Whether a bound may be charged to a per-unit ledger or printed as per unit."""
    return check_bound(bound) in PER_UNIT_BOUNDS


def check_per_unit(bound: str) -> str:
    """Refuse a per-part bound where a per-unit guarantee is charged or stated."""
    if not is_per_unit(bound):
        raise AccountingError(
            f"the {bound!r} bound is proved for one ensemble member added or removed (per "
            "part), not for what one unit of the data changes in privlm's fixed-size "
            f"ensemble (one member replaced); a per-unit ledger is charged with "
            f"{REPLACEMENT!r} only (docs/sharp_edges.md)"
        )
    return bound
