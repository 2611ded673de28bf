"""The mixing rules keep every tensor on the device of the distributions they are given.

A CUDA run found PMixED's λ bracket and its member mask made on the CPU beside log-probs on
the GPU. Without a GPU the same mistake shows on the ``meta`` device, which refuses any mix
with CPU tensors just as CUDA does (the GPU itself: tests/gpu)."""

from __future__ import annotations

import pytest
import torch

from privlm.predict.mollifier import pmixed_lambdas, submix_lambdas
from privlm.predict.pmixed_rule import pmixed_mixture

pytestmark = pytest.mark.fast

META = torch.device("meta")


def _log_probs(*shape: int) -> torch.Tensor:
    return torch.log_softmax(torch.empty(*shape, device=META), dim=-1)


@pytest.mark.parametrize("members", [None, torch.tensor([1, 0, 1, 0, 1], dtype=torch.bool)])
def test_pmixed_release_stays_on_the_members_device(members):
    mix = pmixed_mixture(_log_probs(5, 11), _log_probs(11), 3, 0.5, members)
    assert mix.log_probs.device == META and mix.lambdas.device == META


def test_the_lambda_solvers_stay_on_the_device_of_their_inputs():
    assert pmixed_lambdas(_log_probs(20, 11), _log_probs(11), 6.0, 0.5).device == META
    assert pmixed_lambdas(_log_probs(0, 11), _log_probs(11), 6.0, 0.5).device == META
    assert (
        submix_lambdas(_log_probs(4, 11), _log_probs(4, 11), _log_probs(11), 2.0, 0.1).device
        == META
    )
