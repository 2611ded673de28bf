"""Opacus's accounting analysis (``opacus.accountants.analysis.rdp``) without Opacus.

The analysis module is plain numpy and scipy, but ``import opacus.accountants.analysis``
runs ``opacus/__init__``, which imports torch and the whole privacy engine: seconds of
start-up for a budget calculation. This loads the one module file from the installed
Opacus package instead, so ``import privlm.accounting`` loads neither torch nor Opacus.
The functions are Opacus's own; a test checks this module is the same code
as ``opacus.accountants.analysis.rdp``.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from privlm.errors import PrivlmError


def _load(relative: str, name: str) -> ModuleType:
    spec = importlib.util.find_spec("opacus")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise PrivlmError("Opacus is not installed: pip install opacus")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise PrivlmError(f"Opacus's {relative} is missing from {path.parent}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@functools.cache
def _rdp() -> ModuleType:
    return _load("accountants/analysis/rdp.py", "privlm.accounting.analysis._opacus_rdp")


def __getattr__(name: str) -> ModuleType:
    """``rdp``, Opacus's module, loaded on first use (it imports SciPy: seconds of a
    CLI's start-up that only a computation needs)."""
    if name == "rdp":
        return _rdp()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
