"""The readability table privlm ships (the share of words perturbation leaves unchanged at
each ε, on public text) is what the measurement gives, and the default ε is read from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from privlm.perturb import readability as r

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_perturb_readability import public_lines


@pytest.mark.fast
def test_the_default_is_the_least_measured_epsilon_that_keeps_the_readable_share():
    for mechanism in ("laplace", "gaussian"):
        pts = r.points(mechanism)
        assert [e for e, _ in pts] == sorted(e for e, _ in pts)
        assert [s for _, s in pts] == sorted(s for _, s in pts)  # more ε, more words kept
        eps = r.default_epsilon(mechanism)
        assert r.share_unchanged(mechanism, eps) >= r.READABLE_SHARE
        assert all(s < r.READABLE_SHARE for e, s in pts if e < eps)
        for e, s in pts:
            assert r.share_unchanged(mechanism, e) == pytest.approx(s)
    assert "poorly" in r.trade_off("laplace", 20) and "next to nothing" in r.trade_off(
        "laplace", 300
    )
    with pytest.raises(Exception, match="unknown mechanism"):
        r.default_epsilon("bogus")


def test_the_shipped_table_is_what_the_measurement_gives():
    """One noise draw at the Laplace default, recomputed on the shipped public text: the
    same share as the draw the table records (within a few words of 15,000: a nearest
    neighbour may tie differently under another CPU's float64 products)."""
    eps = r.default_epsilon("laplace")
    recorded = r.measured()["mechanisms"]["laplace"]["by_seed"][f"{eps:g}"][0]
    assert r.measure_share("laplace", eps, public_lines(), seed=0) == pytest.approx(
        recorded, abs=0.002
    )
