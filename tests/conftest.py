"""Shared fixtures. Tests use the ``tiny`` model; real-model checks are marked ``slow``."""

from __future__ import annotations

import os

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
