"""Privacy accounting: stateless analysis, immutable RDP curves, DP-SGD plans, the ledger.

- :mod:`privlm.accounting.analysis`: formulas only (conversion, Poisson amplification,
  Gaussian RDP).
- :mod:`privlm.accounting.curves`: :class:`RdpCurve`, composed by addition.
- :mod:`privlm.accounting.dpsgd`: ε of a DP-SGD plan (RDP or PRV) and noise calibration.
- :mod:`privlm.accounting.ledger`: :class:`PrivacyLedger`, durable and fail-closed.
- :mod:`privlm.accounting.pate`: Confident-GNMax queries (PromptPATE) as RDP curves.

>>> from privlm.accounting import dpsgd_epsilon
>>> round(dpsgd_epsilon(1.5, 0.04, 2250, 1e-5).epsilon, 3)
7.329
"""

from privlm.accounting.analysis import (
    DpConversion,
    balle_epsilon,
    classic_epsilon,
    gaussian_rdp,
    poisson_subsampled_rdp,
    subsampled_gaussian_rdp,
)
from privlm.accounting.composition import Spent
from privlm.accounting.curves import NEIGHBOURING_RELATION, RdpCurve
from privlm.accounting.dpsgd import (
    ACCOUNTANTS,
    Calibration,
    DpSgdPlan,
    EpsilonReport,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
)
from privlm.accounting.ledger import (
    Budget,
    Charge,
    ChargeRecord,
    PrivacyLedger,
    charge_together,
)
from privlm.accounting.orders import DEFAULT_ORDERS, INTEGER_ORDERS
from privlm.accounting.pate import (
    GnmaxPlan,
    ReleasedRdp,
    SmoothRelease,
    confident_gnmax_curve,
    data_independent_query_curve,
    plan_gnmax,
    release_data_dependent_rdp,
)
from privlm.accounting.relations import Relation

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ORDERS",
    "INTEGER_ORDERS",
    "NEIGHBOURING_RELATION",
    "Budget",
    "Calibration",
    "Charge",
    "ChargeRecord",
    "DpConversion",
    "DpSgdPlan",
    "EpsilonReport",
    "GnmaxPlan",
    "PrivacyLedger",
    "RdpCurve",
    "Relation",
    "ReleasedRdp",
    "SmoothRelease",
    "Spent",
    "balle_epsilon",
    "calibrate_noise_multiplier",
    "charge_together",
    "classic_epsilon",
    "confident_gnmax_curve",
    "data_independent_query_curve",
    "dpsgd_epsilon",
    "gaussian_rdp",
    "plan_gnmax",
    "poisson_subsampled_rdp",
    "release_data_dependent_rdp",
    "subsampled_gaussian_rdp",
]
