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

from typing import TYPE_CHECKING

from privlm.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
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

# each name's submodule: ``import privlm.accounting`` loads neither SciPy nor SQLAlchemy
# until a name that needs them is used (a CLI's --help and its argument errors stay fast)
EXPORTS = {
    "DpConversion": "analysis",
    "balle_epsilon": "analysis",
    "classic_epsilon": "analysis",
    "gaussian_rdp": "analysis",
    "poisson_subsampled_rdp": "analysis",
    "subsampled_gaussian_rdp": "analysis",
    "Spent": "composition",
    "NEIGHBOURING_RELATION": "curves",
    "RdpCurve": "curves",
    "ACCOUNTANTS": "dpsgd",
    "Calibration": "dpsgd",
    "DpSgdPlan": "dpsgd",
    "EpsilonReport": "dpsgd",
    "calibrate_noise_multiplier": "dpsgd",
    "dpsgd_epsilon": "dpsgd",
    "Budget": "ledger",
    "Charge": "ledger",
    "ChargeRecord": "ledger",
    "PrivacyLedger": "ledger",
    "charge_together": "ledger",
    "DEFAULT_ORDERS": "orders",
    "INTEGER_ORDERS": "orders",
    "GnmaxPlan": "pate",
    "ReleasedRdp": "pate",
    "SmoothRelease": "pate",
    "confident_gnmax_curve": "pate",
    "data_independent_query_curve": "pate",
    "plan_gnmax": "pate",
    "release_data_dependent_rdp": "pate",
    "Relation": "relations",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
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
