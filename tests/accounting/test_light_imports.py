"""``import privlm.accounting`` loads neither torch nor Opacus, and the Opacus
analysis it loads on its own is Opacus's code, giving Opacus's numbers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.fast


def test_importing_the_accounting_loads_neither_torch_nor_opacus():
    code = (
        "import sys, privlm.accounting, privlm.accounting.analysis.pmixed; "
        "print(sorted(m for m in ('torch', 'opacus') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_standalone_analysis_is_opacus_own():
    from opacus.accountants.analysis import rdp as packaged

    from privlm.accounting.analysis.opacus_analysis import rdp as standalone

    assert standalone.__file__ == packaged.__file__
    orders = [1.5, 2.0, 3.25, 8.0, 32.0, 256.0]
    for q, sigma, steps in [(0.01, 1.1, 1000), (0.3, 0.7, 5), (1.0, 2.0, 10)]:
        np.testing.assert_array_equal(
            standalone.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders),
            packaged.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders),
        )


@pytest.mark.parametrize("package", ["privlm.accounting", "privlm.accounting.analysis"])
def test_a_lazy_packages_three_name_lists_agree(package):
    """Its TYPE_CHECKING imports (for type checkers), EXPORTS (at run time) and __all__ name
    the same names, and each resolves to its submodule's object."""
    import importlib

    mod = importlib.import_module(package)
    assert sorted(mod.EXPORTS) == sorted(mod.__all__)
    for name, sub in mod.EXPORTS.items():
        assert getattr(mod, name) is getattr(importlib.import_module(f"{package}.{sub}"), name)
