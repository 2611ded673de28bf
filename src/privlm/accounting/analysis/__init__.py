"""Stateless accounting math: functions of numbers to numbers, no state, no I/O.

The stateful parts (curves being composed, the durable ledger) live one level up. Names
load on first use: the Gaussian mechanism's RDP needs SciPy, the other formulas do not.
"""

from typing import TYPE_CHECKING

from privlm.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from privlm.accounting.analysis.conversion import DpConversion, balle_epsilon, classic_epsilon
    from privlm.accounting.analysis.gaussian import gaussian_rdp, subsampled_gaussian_rdp
    from privlm.accounting.analysis.poisson_amplification import poisson_subsampled_rdp

EXPORTS = {
    "DpConversion": "conversion",
    "balle_epsilon": "conversion",
    "classic_epsilon": "conversion",
    "gaussian_rdp": "gaussian",
    "subsampled_gaussian_rdp": "gaussian",
    "poisson_subsampled_rdp": "poisson_amplification",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = [
    "DpConversion",
    "balle_epsilon",
    "classic_epsilon",
    "gaussian_rdp",
    "poisson_subsampled_rdp",
    "subsampled_gaussian_rdp",
]
