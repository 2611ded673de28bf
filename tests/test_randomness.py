"""Privacy randomness: the OS CSPRNG by default, fresh every run; a seed only
for reproducible experiments, and then a warning. Distributions checked against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from privlm.randomness import SEEDED_WARNING, PrivacyRandomness, as_randomness

pytestmark = pytest.mark.fast


def test_csprng_uniforms_and_normals_have_the_right_law():
    rng = PrivacyRandomness()
    u = rng.uniform(20_000)
    assert ((u > 0) & (u < 1)).all()
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    z = rng.normal(2.0, 20_000)
    assert stats.kstest(z / 2.0, "norm").pvalue > 1e-4


def test_categorical_matches_the_distribution_and_never_draws_a_zero():
    rng = PrivacyRandomness()
    p = np.array([0.5, 0.0, 0.3, 0.2])
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    draws = np.bincount([rng.categorical(log_p) for _ in range(6000)], minlength=4)
    assert draws[1] == 0
    expected = 6000 * p[[0, 2, 3]]
    assert stats.chisquare(draws[[0, 2, 3]], expected).pvalue > 1e-4


def test_bernoulli_rate():
    keep = PrivacyRandomness().bernoulli(50_000, 0.03)
    assert abs(keep.mean() - 0.03) < 0.004


def test_no_seed_is_fresh_and_a_seed_repeats():
    assert not np.array_equal(PrivacyRandomness().uniform(8), PrivacyRandomness().uniform(8))
    assert np.array_equal(PrivacyRandomness(5).uniform(8), PrivacyRandomness(5).uniform(8))
    assert not np.array_equal(PrivacyRandomness(5).uniform(8), PrivacyRandomness(6).uniform(8))
    assert PrivacyRandomness(5).integer() == PrivacyRandomness(5).integer()
    assert PrivacyRandomness().integer() != PrivacyRandomness().integer()


def test_torch_generators_fresh_unless_seeded():
    a, b = PrivacyRandomness().torch_generator(), PrivacyRandomness().torch_generator()
    assert not torch.equal(torch.rand(16, generator=a), torch.rand(16, generator=b))
    s, t = PrivacyRandomness(3), PrivacyRandomness(3)
    assert torch.equal(
        torch.randn(16, generator=s.torch_generator()),
        torch.randn(16, generator=t.torch_generator()),
    )
    one = PrivacyRandomness(3)  # each call is a new stream
    assert not torch.equal(
        torch.rand(8, generator=one.torch_generator()),
        torch.rand(8, generator=one.torch_generator()),
    )
    g = PrivacyRandomness().torch_generator()
    assert stats.kstest(torch.randn(20_000, generator=g).numpy(), "norm").pvalue > 1e-4


def test_why_a_cpu_generator_gets_its_whole_state():
    """torch's CPU generator keeps only 32 bits of a seed: seeding it with 63 random bits
    (what PMixED and SubMix did) leaves 2^32 candidates, a feasible search."""
    a = torch.Generator().manual_seed(12345)
    b = torch.Generator().manual_seed(12345 + 2**32)
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
    assert follows_seed_expansion(torch.Generator().manual_seed(2**40 + 7))
    assert not follows_seed_expansion(PrivacyRandomness().torch_generator())


def follows_seed_expansion(gen: torch.Generator) -> bool:
    """Whether the 624 words follow mt19937's seeding recurrence, i.e. the whole state is a
    function of its first 32-bit word."""
    w = gen.get_state().numpy()[24 : 24 + 624 * 8].view(np.uint64).astype(object)
    return all(
        w[i] == (1812433253 * (int(w[i - 1]) ^ (int(w[i - 1]) >> 30)) + i) % 2**32
        for i in range(1, 624)
    )


def test_statements():
    assert PrivacyRandomness().statement() == {
        "randomness": "fresh OS entropy (CSPRNG); no seed",
        "seed": None,
    }
    seeded = PrivacyRandomness(9).statement()
    assert seeded["seed"] == 9 and seeded["warning"] == SEEDED_WARNING
    assert "does not hold against anyone who knows the seed" in SEEDED_WARNING
    assert as_randomness(9).seed == 9 and as_randomness(None).seed is None
    with pytest.raises(ValueError):
        PrivacyRandomness(-1)


@pytest.mark.parametrize("byte", [b"\xff", b"\x00"])
def test_the_extreme_csprng_words_give_uniforms_strictly_inside_the_unit_interval(
    monkeypatch, byte
):
    """The largest 64-bit word once rounded to exactly 1.0, whose normal was +∞."""
    import os

    from privlm import randomness

    monkeypatch.setattr(os, "urandom", lambda n: byte * n)
    u = randomness.csprng_uniforms(4)
    assert np.all((u > 0) & (u < 1))
    z = randomness.PrivacyRandomness().normal(1.0, 4)
    assert np.all(np.isfinite(z)) and abs(float(z[0])) < 9
