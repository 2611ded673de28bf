"""GPU tests: marked ``gpu``, skipped without CUDA, run by ``make test-gpu``.

Each compares what a tiny model computes on the GPU with what it computes on the CPU, or
checks a guarantee on the GPU's own outputs. The CPU suite pins itself to the CPU
(``tests/conftest.py``); these tests name their device explicitly.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.predict.conftest import make_adapters

# PRIVLM_GPU_TEST_DEVICE=cpu dry-runs these tests on the CPU, to check the tests themselves
# on a machine without a GPU; their comparisons are then CPU against CPU.
DEVICE = os.environ.get("PRIVLM_GPU_TEST_DEVICE", "cuda")


def pytest_collection_modifyitems(items):
    skip = pytest.mark.skip(reason="no CUDA GPU: GPU tests run with make test-gpu on one")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if DEVICE == "cuda" and not torch.cuda.is_available():
                item.add_marker(skip)


@pytest.fixture(scope="session")
def adapter_dirs(tmp_path_factory):
    return make_adapters(tmp_path_factory.mktemp("gpu-adapters"), 4)
