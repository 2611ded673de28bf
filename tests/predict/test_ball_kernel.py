"""The fused CPU solve of Eq. 5 (privlm.predict.ball_kernel) against the torch bisection it
replaces for many rows, and against the ball itself in 40-digit arithmetic."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

from privlm.predict import ball_kernel
from privlm.predict.mollifier import BALL_MARGIN, ball_bound, ball_margin, pmixed_lambdas

mpmath.mp.dps = 40


def _torch_solve(monkeypatch, *args, **kwargs) -> torch.Tensor:
    with monkeypatch.context() as m:
        m.setattr(ball_kernel, "MIN_ROWS", 10**9)
        return pmixed_lambdas(*args, **kwargs)


def _rows(rng: np.random.Generator, m: int, vocab: int, spread: float) -> torch.Tensor:
    """``m`` log-pmfs: logits of scale ``spread``, some with tokens nearly ruled out."""
    logits = rng.normal(0.0, spread, (m, vocab))
    logits[::3, rng.integers(vocab)] -= 40.0  # a token the member nearly rules out
    logits[1::3, rng.integers(vocab)] += 12.0  # a peaked member
    return torch.log_softmax(torch.from_numpy(logits), dim=-1)


@pytest.mark.parametrize("order", [4.0, 5.0, 6.0, 8.0])
@pytest.mark.parametrize("shared_p0", [True, False])
def test_the_fused_solve_is_the_torch_solve(monkeypatch, order, shared_p0):
    rng = np.random.default_rng(int(order) + 10 * shared_p0)
    vocab, m = 257, 24
    for radius in (1e-3, 0.05, 0.376, 2.0, 30.0):
        for tol in (1e-4, 1e-2, 1e-13):
            log_p = _rows(rng, m, vocab, 2.0).float()
            log_p0 = _rows(rng, 1 if shared_p0 else m, vocab, 2.0)
            log_p0 = log_p0[0] if shared_p0 else log_p0
            assert ball_kernel.applies(log_p, order)
            fused = pmixed_lambdas(log_p, log_p0, order, radius, tol)
            reference = _torch_solve(monkeypatch, log_p, log_p0, order, radius, tol)
            assert fused.dtype == reference.dtype == torch.float64
            np.testing.assert_allclose(fused.numpy(), reference.numpy(), rtol=0, atol=1e-12)


def test_members_equal_to_the_public_model_get_one_and_overflow_lowers_lambda(monkeypatch):
    vocab = 64
    log_p0 = torch.log_softmax(torch.randn(vocab, dtype=torch.float64), -1)
    log_p = log_p0.repeat(20, 1)
    log_p[10:, 0] = 800.0  # an overflowing ratio: t**M is inf, so the constraint fails
    log_p[15:, 1] = -torch.inf  # a token the member rules out: r = 0
    fused = pmixed_lambdas(log_p, log_p0, 6.0, 0.3)
    assert torch.all(fused[:10] == 1.0)
    assert torch.all(fused[10:] < 1.0)
    np.testing.assert_array_equal(
        fused.numpy(), _torch_solve(monkeypatch, log_p, log_p0, 6.0, 0.3).numpy()
    )


@pytest.mark.parametrize("radius", [0.05, 1.0, 30.0])
def test_every_fused_lambda_keeps_its_mixture_inside_the_ball(radius):
    """The exact (40-digit) divergence of each accepted mixture, both directions at the ball's
    order, is within the radius: the solve rounds toward privacy."""
    rng = np.random.default_rng(int(radius * 100))
    order, vocab, m = 6, 5, 16
    p0 = rng.dirichlet(np.full(vocab, 0.3))
    p0[rng.integers(vocab)] = 1e-15
    p0 /= p0.sum()
    p = rng.dirichlet(np.full(vocab, 0.3), size=m)
    p[np.arange(m), rng.integers(vocab, size=m)] = 10.0 ** rng.uniform(-17, -12, size=m)
    p /= p.sum(axis=1, keepdims=True)
    lam = pmixed_lambdas(torch.from_numpy(np.log(p)), torch.from_numpy(np.log(p0)), order, radius)
    assert ball_kernel.applies(torch.from_numpy(p), order)
    for row, weight in zip(p, lam.tolist(), strict=True):
        w = mpmath.mpf(weight)
        mix = [w * a + (1 - w) * b for a, b in zip(row, p0, strict=True)]
        q0 = [mpmath.mpf(b) for b in p0]
        fwd = mpmath.log(sum(b * (a / b) ** order for a, b in zip(mix, q0, strict=True)))
        rev = mpmath.log(sum(a * (b / a) ** order for a, b in zip(mix, q0, strict=True)))
        assert max(fwd, rev) / (order - 1) <= radius


def test_the_result_does_not_depend_on_the_threads():
    rng = np.random.default_rng(3)
    log_p, log_p0 = _rows(rng, 37, 300, 3.0), _rows(rng, 1, 300, 3.0)[0]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = pmixed_lambdas(log_p, log_p0, 6.0, 0.2)
        torch.set_num_threads(2)
        two = pmixed_lambdas(log_p, log_p0, 6.0, 0.2)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_which_solve_runs_depends_on_public_settings_only(monkeypatch):
    many = torch.zeros(ball_kernel.MIN_ROWS, 8)
    assert ball_kernel.applies(many, 6.0)
    assert not ball_kernel.applies(many[:-1], 6.0)  # few members: no compilation to pay
    assert not ball_kernel.applies(many, 5.5)  # a fractional order: the torch solve
    assert not ball_kernel.applies(many.to("meta"), 6.0)
    monkeypatch.setattr(ball_kernel, "_numba", lambda: None)
    assert not ball_kernel.applies(many, 6.0)  # without numba: the torch solve


def _fused(threads: int) -> list[float]:
    rng = np.random.default_rng(3)
    log_p, log_p0 = _rows(rng, 37, 300, 3.0), _rows(rng, 1, 300, 3.0)[0]
    p0 = log_p0.exp()
    bound = ball_bound(6.0, 0.2, 300)
    return ball_kernel.fused_ball_lambdas(log_p, log_p0, p0, 6.0, bound, 14, threads).tolist()


def _solve_in_child(queue) -> None:  # type: ignore[no-untyped-def]
    queue.put(_fused(threads=2))


def test_a_forked_child_solves_with_its_own_threads():
    """The parent's thread pool does not survive a fork (a data loader, a worker process): a
    child given the parent's pool would queue its rows for threads it does not have and
    wait forever; it makes its own. (torch is kept to one thread here: its own OpenMP pool
    does not survive a fork either, which is torch's limitation, not this solve's.)"""
    import multiprocessing

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parent = _fused(threads=2)  # the parent's pool now exists, its threads idle
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_solve_in_child, args=(queue,))
        child.start()
        try:
            got = queue.get(timeout=60)
        finally:
            child.kill()
            child.join(timeout=30)
    finally:
        torch.set_num_threads(before)
    assert got == parent


def test_the_margin_covers_a_sums_worst_rounding():
    """(V − 1)·2⁻⁵³ bounds the relative rounding of a sum of V non-negative terms; the margin
    stays above it (and the terms' own errors) at every vocabulary size, and keeps its floor."""
    for vocab in (2, 257, 9_000, 49_152, 128_256, 262_144):
        assert ball_margin(vocab) >= max(BALL_MARGIN, 2 * (vocab - 1) * 2.0**-53)
    assert ball_margin(8) == BALL_MARGIN
    assert ball_bound(6.0, 0.5, 49_152) < ball_bound(6.0, 0.5, 8) < np.exp(0.5 * 5)
