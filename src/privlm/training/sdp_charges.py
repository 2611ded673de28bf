"""Which budget charges carry a DP guarantee, and which only selective DP (JFT).

Just Fine-tune Twice (Shi et al. 2022, §3) releases a model that is selective-DP under its
secret-detection policy, never plain DP: what the policy missed was learnt in phase 1
without the noise that covers it. Its DP-SGD runs still draw on the dataset's budget, so
the ledger charges them like any other, under these names; a budget view sums them apart
from DP spending, so that an ε spent on JFT is never read as a DP bound.
"""

from __future__ import annotations

PHASE1_CHARGE = "jft-phase1-light-noise"
PHASE2_CHARGE = "jft-phase2"
SDP_CHARGES = frozenset({PHASE1_CHARGE, PHASE2_CHARGE})
SDP_NOTE = (
    "selective DP under each JFT job's secret-detection policy (Shi et al. 2022): no DP bound "
    "for what the policy missed; it uses the dataset's budget all the same"
)


def charge_guarantee(mechanism: str) -> str:
    """``"SDP"`` for a JFT charge, ``"DP"`` for every other."""
    return "SDP" if mechanism in SDP_CHARGES else "DP"
