"""DP-SGD's secure mode without torchcsprng. The noise's law is checked against
the normal distribution, the coins' rate against q, and a secure run is shown to leave every
torch and numpy generator untouched, so nothing in it is predictable from a PRNG stream."""

from __future__ import annotations

import json

import pytest
import torch
from scipy import stats

from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.training import dpsgd as dp
from privlm.training.secure_noise import (
    SECURE_STATEMENT,
    csprng_coins,
    csprng_gaussian,
    csprng_standard_normal,
    install_csprng_noise,
)

CFG = dict(batch_size=16, physical_batch_size=4, epochs=1, block_size=24, learning_rate=1e-2)


def dataset(n=48, users=None):
    recs = [Record(f"record {i} says {i * 7 % 13}", f"u{i % users}" if users else f"r{i}")
            for i in range(n)]  # fmt: skip
    return Dataset(recs, "mem", "user" if users else "record")


@pytest.mark.fast
def test_the_noise_is_standard_normal_and_fresh():
    z = csprng_standard_normal(200_000)
    assert abs(z.mean()) < 0.01 and z.var() == pytest.approx(1.0, abs=0.01)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert stats.kurtosis(z) == pytest.approx(0.0, abs=0.05)  # Gaussian tails, not a sum's
    t = csprng_gaussian((3, 1000), 2.5, torch.device("cpu"), torch.float32)
    assert t.shape == (3, 1000) and t.dtype == torch.float32
    assert t.std().item() == pytest.approx(2.5, rel=0.05)
    torch.manual_seed(0)
    a = csprng_gaussian((8,), 1.0, torch.device("cpu"), torch.float32)
    torch.manual_seed(0)
    assert not torch.equal(a, csprng_gaussian((8,), 1.0, torch.device("cpu"), torch.float32))


@pytest.mark.fast
def test_the_coins_keep_each_unit_with_probability_q():
    kept = csprng_coins(400_000, 0.1)
    assert kept.dtype == torch.bool and kept.float().mean().item() == pytest.approx(0.1, abs=2e-3)


def test_an_opacus_optimizer_gets_csprng_noise_of_the_right_scale():
    from opacus.optimizers import DPOptimizer

    p = torch.nn.Parameter(torch.zeros(50_000))
    opt = DPOptimizer(torch.optim.SGD([p], lr=1.0), noise_multiplier=1.5, max_grad_norm=2.0,
                      expected_batch_size=1, loss_reduction="sum")  # fmt: skip
    install_csprng_noise(opt)
    p.grad_sample = torch.zeros(1, 50_000)  # type: ignore[attr-defined]
    state = torch.random.get_rng_state()
    opt.step()
    assert torch.equal(state, torch.random.get_rng_state())  # torch's RNG never consulted
    moved = -p.detach()
    assert moved.std().item() == pytest.approx(1.5 * 2.0, rel=0.02)


@pytest.mark.parametrize("users,sampling", [(None, "joint"), (12, "joint"), (12, "one-per-user")])
def test_secure_dpsgd_trains_states_it_and_differs_between_runs(
    tmp_path, users, sampling, monkeypatch
):
    """Record level (Opacus's optimizer, privlm's CSPRNG sampler), user level with joint
    clipping, and one record per sampled user (the pick from the CSPRNG too): the same data
    twice gives different adapters, and no torch generator is ever made."""
    import privlm.training.dpsgd as module

    def no_prng(*args, **kwargs):
        raise AssertionError("secure mode drew from a torch generator")

    monkeypatch.setattr(module.PrivacyRandomness, "torch_generator", no_prng)
    cfg = dp.DpSgdConfig(target_epsilon=3.0, secure_mode=True, user_sampling=sampling, **CFG)
    st = dp.train_dpsgd("tiny", dataset(users=users), tmp_path / "a", cfg, progress=False)
    dp.train_dpsgd("tiny", dataset(users=users), tmp_path / "b", cfg, progress=False)
    assert st.randomness == SECURE_STATEMENT["randomness"] and st.seed is None
    saved = json.loads((tmp_path / "a" / "privacy.json").read_text())
    assert saved["randomness"].startswith("secure mode") and saved["epsilon"] <= 3.0
    a = (tmp_path / "a" / "adapter_model.safetensors").read_bytes()
    assert a != (tmp_path / "b" / "adapter_model.safetensors").read_bytes()


@pytest.mark.fast
def test_secure_mode_cannot_be_seeded():
    with pytest.raises(PrivlmError, match="cannot be seeded"):
        dp.DpSgdConfig(target_epsilon=3.0, secure_mode=True, seed=1)
