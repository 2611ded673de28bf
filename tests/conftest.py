"""Shared fixtures. Tests use the ``tiny`` model; real-model checks are marked ``slow``."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

from privlm.data import corpora

# The CPU suite is defined on the CPU in float32, also on a machine with a GPU; the GPU tests
# (tests/gpu, make test-gpu) name their device explicitly.
os.environ.setdefault("PRIVLM_DEVICE", "cpu")


@pytest.fixture(scope="session")
def tiny():
    from privlm.models import load_public_model

    return load_public_model("tiny")


requires_data = pytest.mark.skipif(
    not all(corpora.available().values()),
    reason="the bundled corpora (PRIVLM_DATA or ../shared/data) are not present",
)


# The fast loop (`make fast`, `pytest -m fast`): tests marked ``fast`` load no model, train
# nothing and start no server, and a guard proves it (tests/fastguard/privlm_fast_guard.py):
# installed here, when pytest is configured, before any test module is imported, on the
# classes every such path constructs, and in every Python process a fast test starts
# (docs/architecture.md, "Tests").
GUARD_DIR = Path(__file__).with_name("fastguard")
sys.path.insert(0, str(GUARD_DIR))
import privlm_fast_guard  # noqa: E402

_running: dict[str, str | None] = {"test": None}


def pytest_configure(config):
    privlm_fast_guard.install(lambda: _running["test"])


def pytest_collection_modifyitems(config, items):
    """Every doctest of the package is fast (each is checked by the guard like any test)."""
    from _pytest.doctest import DoctestItem

    for item in items:
        if isinstance(item, DoctestItem):
            item.add_marker(pytest.mark.fast)


@contextlib.contextmanager
def _guarded(item):
    """While a fast test is set up or runs: the guard is on, here and in its children."""
    if item.get_closest_marker("fast") is None:
        yield
        return
    _running["test"] = item.nodeid
    saved = {k: os.environ.get(k) for k in (privlm_fast_guard.ENV, "PYTHONPATH")}
    os.environ[privlm_fast_guard.ENV] = item.nodeid
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(GUARD_DIR), saved["PYTHONPATH"]) if p
    )
    try:
        yield
    finally:
        _running["test"] = None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _guarded(item):
        return (yield)
