"""The perturbation mechanisms' math against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privlm.errors import PrivlmError
from privlm.perturb import GaussianWordMechanism, LaplaceWordMechanism, make_mechanism
from privlm.perturb.gaussian_calibration import gaussian_delta, gaussian_epsilon, gaussian_sigma
from privlm.perturb.mechanisms import clip_rows
from privlm.perturb.uniforms import UniformSource, standard_normals

pytestmark = pytest.mark.fast


def pld_delta(sigma, sensitivity, epsilon, compositions=1):
    from dp_accounting.pld import privacy_loss_distribution as pld

    d = pld.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=sensitivity, value_discretization_interval=1e-4
    )
    return (
        d.self_compose(compositions).get_delta_for_epsilon(epsilon)
        if compositions > 1
        else (d.get_delta_for_epsilon(epsilon))
    )


@pytest.mark.parametrize(
    ("eps", "sigma", "sens"), [(1.0, 3.0, 1.0), (5.0, 2.0, 10.0), (0.3, 1.0, 1.0)]
)
def test_gaussian_delta_is_the_exact_profile(eps, sigma, sens):
    """Balle & Wang's exact δ(ε) against dp-accounting's (pessimistic) privacy-loss
    distribution: never above it, and within 1 %."""
    ours, theirs = gaussian_delta(eps, sigma, sens), pld_delta(sigma, sens, eps)
    assert ours <= theirs * (1 + 1e-9)
    assert ours == pytest.approx(theirs, rel=1e-2)


def test_calibration_round_trips_and_never_undershoots():
    for eps, delta, sens in [(0.5, 1e-5, 1.0), (8.0, 1e-6, 10.0), (100.0, 1e-5, 10.0)]:
        sigma = gaussian_sigma(eps, delta, sens)
        assert gaussian_delta(eps, sigma, sens) <= delta
        assert gaussian_delta(eps, sigma * (1 - 1e-9), sens) > delta * (1 - 1e-6)
        assert gaussian_epsilon(sigma, sens, delta) == pytest.approx(eps, rel=1e-9)


def test_document_guarantee_matches_composing_the_words():
    """n noised words are one Gaussian on the concatenation with sensitivity Δ√n: its ε at δ
    matches dp-accounting composing the n word mechanisms."""
    m = GaussianWordMechanism(4.0, 1e-5, clip=2.0)
    n = 9
    ours = m.document_guarantee(n)["epsilon"]
    assert pld_delta(m.sigma, m.sensitivity, ours, n) == pytest.approx(1e-5, rel=0.05)


def test_laplace_radius_is_gamma_and_direction_uniform():
    """Density ∝ exp(−ε_m‖z‖) in d dimensions ⇔ ‖z‖ ~ Gamma(d, 1/ε_m), direction uniform."""
    m = LaplaceWordMechanism(10.0, clip=5.0)
    src = UniformSource(3)
    z = np.stack([m.noise(src(100), 50) for _ in range(3000)])
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(50, scale=1 / m.metric_epsilon).cdf).pvalue > 1e-3
    assert np.abs((z / r[:, None]).mean(0)).max() < 0.05
    assert m.word_guarantee()["epsilon"] == pytest.approx(2 * 5.0 * m.metric_epsilon)


def test_laplace_guarantee_holds_for_the_density():
    """The metric-DP bound, checked on the noise density itself: for clipped x, x′ the
    log-density ratio at any y is at most ε_m‖x − x′‖ ≤ ε (per word)."""
    m = LaplaceWordMechanism(6.0, clip=1.0)
    rng = np.random.default_rng(0)
    x, x2 = clip_rows(rng.normal(size=(2, 5)) * 3, 1.0)
    for y in rng.normal(size=(200, 5)) * 2:
        ratio = m.metric_epsilon * (np.linalg.norm(y - x2) - np.linalg.norm(y - x))
        assert ratio <= m.metric_epsilon * np.linalg.norm(x - x2) + 1e-12 <= m.epsilon + 1e-12


def test_box_muller_gives_standard_normals():
    g = standard_normals(UniformSource(1)(20000))
    assert stats.kstest(g, "norm").pvalue > 1e-3


@pytest.mark.parametrize(
    "bad",
    [
        dict(name="laplace", epsilon=0.0),
        dict(name="laplace", epsilon=math.inf),
        dict(name="gaussian", epsilon=1.0, delta=1.0),
        dict(name="gaussian", epsilon=1.0, delta=0.0),
        dict(name="gaussian", epsilon=1.0),
        dict(name="laplace", epsilon=1.0, clip=-1.0),
        dict(name="uniform", epsilon=1.0),
    ],
)
def test_invalid_parameters_are_refused(bad):
    with pytest.raises(PrivlmError):
        make_mechanism(**bad)


def test_unknown_words_are_perturbed_from_the_zero_vector():
    from privlm.perturb import load_glove, perturb_text

    vocab = load_glove(500)
    assert not vocab.embed("zyxwvut").any()
    res = perturb_text("zyxwvut qqqq", vocab, make_mechanism("laplace", 5.0), UniformSource(0))
    assert len(res.text.split()) == 2 and "zyxwvut" not in res.text
