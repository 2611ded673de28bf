"""Eq. 5's bisection fused into one pass over the vocabulary per step, on the CPU.

:func:`privlm.predict.mollifier.pmixed_lambdas` finds, per member, the largest λ whose mixture
λ p + (1 − λ) p₀ stays in the Rényi ball around p₀, by a fixed number of bisection steps.
Written in torch, each step reads and writes several vocabulary-sized float64 arrays (the
mixture ratio t, its power, their quotient), and at N = 80 members that solve was nearly all
of PMixED's time per token on a CPU (docs/results.md). Here each step is one loop over the
vocabulary that keeps t, t^M and both power sums in registers, compiled by numba for the
order M at hand (the power unrolled into multiplications). Rows are split evenly over
threads (numba releases the GIL), a split that depends on the number of rows only.

**The same definition as the torch solve**, to its rounding: r = exp(log p − log p₀) in
float64, t = (1 − λ) + λ·r (two non-negative terms, no cancellation; the compiler may fuse
them into one multiply-add, which rounds once instead of twice), Σ p₀ t^M and
Σ p₀ t^{1−M} = Σ p₀ t/t^M compared with the same bound (the radius less
:func:`~privlm.predict.mollifier.ball_margin`, which covers a sum's rounding in any order of
addition), a NaN or an overflow failing the comparison (so it lowers λ), λ = 1 tested
first, then ``steps`` halvings, the lower end of the bracket returned. Only the order of the
additions within a sum differs (reassociated so that they vectorise).
``tests/predict/test_ball_kernel.py`` checks the two equal.

**The same work for every input**: every row runs ``steps + 1`` passes over the whole
vocabulary whatever its values, as the torch solve does (:mod:`privlm.predict.mollifier`).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

MIN_ROWS = 16  # fewer rows: the torch solve, which needs no compilation (about 1.5 s)
MAX_ORDER = 64


@functools.cache
def _numba() -> Any:
    """numba, or None where it cannot be imported (the torch solve is used then)."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    return numba


def applies(log_p: torch.Tensor, order: float) -> bool:
    """Whether the fused solve takes these rows: a CPU tensor of at least ``MIN_ROWS`` rows,
    an integer order in [2, ``MAX_ORDER``], and numba importable. Public quantities only
    (the number of members, the order), so the choice says nothing about the data."""
    return (
        log_p.device.type == "cpu"
        and log_p.dim() == 2
        and log_p.shape[0] >= MIN_ROWS
        and float(order).is_integer()
        and 2 <= order <= MAX_ORDER
        and _numba() is not None
    )


@functools.cache
def _kernel(order: int) -> Callable[..., None]:
    """The solve for one order M, compiled once per process (M is a compile-time constant,
    so t**M becomes multiplications)."""
    numba = _numba()

    # IEEE arithmetic (0/0 is NaN, not an exception); sums reassociated so that they vectorise
    jit = numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})

    @jit
    def solve(lp, lp0, p0, bound, steps, out, start, stop):  # type: ignore[no-untyped-def]
        vocab = lp.shape[1]
        r = np.empty(vocab)
        shared = lp0.shape[0] == 1
        for i in range(start, stop):
            j = 0 if shared else i
            for v in range(vocab):
                r[v] = math.exp(lp[i, v] - lp0[j, v])
            lo, hi, ok_at_one = 0.0, 1.0, False
            for step in range(steps + 1):
                lam = 1.0 if step == 0 else 0.5 * (lo + hi)
                keep = 1.0 - lam
                forward, reverse = 0.0, 0.0
                for v in range(vocab):
                    t = keep + lam * r[v]
                    t_m = t**order
                    forward += p0[j, v] * t_m
                    reverse += p0[j, v] * (t / t_m)
                ok = forward <= bound and reverse <= bound  # False for NaN
                if step == 0:
                    ok_at_one = ok
                elif ok:
                    lo = lam
                else:
                    hi = lam
            out[i] = 1.0 if ok_at_one else lo

    return solve  # type: ignore[no-any-return]


@functools.cache
def _pool(pid: int) -> ThreadPoolExecutor:
    """One pool per process (keyed by its id: a forked child, whose copy of the parent's pool
    has no threads, makes its own); a solve submits at most torch's thread count of jobs."""
    return ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="privlm-ball")


def fused_ball_lambdas(
    log_p: torch.Tensor,
    log_p0: torch.Tensor,
    p0: torch.Tensor,
    order: float,
    bound: float,
    steps: int,
    threads: int | None = None,
) -> torch.Tensor:
    """λ per row of ``log_p`` (m, V) against ``log_p0`` and ``p0`` = exp(log_p0), each (V,)
    or (m, V), all float64 on the CPU, on ``threads`` threads (default: torch's count): see
    the module docstring."""
    solve = _kernel(int(order))
    lp = np.ascontiguousarray(log_p.detach().double().numpy())
    lp0 = np.ascontiguousarray(log_p0.detach().double().reshape(-1, lp.shape[1]).numpy())
    q0 = np.ascontiguousarray(p0.detach().double().reshape(-1, lp.shape[1]).numpy())
    out = np.empty(lp.shape[0])
    threads = max(1, min(threads or torch.get_num_threads(), lp.shape[0]))
    cuts = np.linspace(0, lp.shape[0], threads + 1).astype(int)
    if threads == 1:
        solve(lp, lp0, q0, bound, steps, out, 0, lp.shape[0])
    else:
        jobs = [
            _pool(os.getpid()).submit(solve, lp, lp0, q0, bound, steps, out, int(a), int(b))
            for a, b in itertools.pairwise(cuts)
        ]
        for job in jobs:
            job.result()
    return torch.from_numpy(out)
