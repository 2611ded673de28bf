"""Stateless accounting math: functions of numbers to numbers, no state, no I/O.

The stateful parts (curves being composed, the durable ledger) live one level up.
"""

from privlm.accounting.analysis.conversion import DpConversion, balle_epsilon, classic_epsilon
from privlm.accounting.analysis.gaussian import gaussian_rdp, subsampled_gaussian_rdp
from privlm.accounting.analysis.poisson_amplification import poisson_subsampled_rdp

__all__ = [
    "DpConversion",
    "balle_epsilon",
    "classic_epsilon",
    "gaussian_rdp",
    "poisson_subsampled_rdp",
    "subsampled_gaussian_rdp",
]
