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


def test_the_pages_share_of_unchanged_words_is_pythons(tmp_path):
    """The upload page says beside ε what share of words survives: perturb.js computes it
    from the same measured points (GET /v1/defaults) as privlm.perturb.readability."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    from privlm.perturb import readability

    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to test perturb.js (the Makefile installs it)")
    root = Path(__file__).resolve().parents[2]
    mechanisms = ("laplace", "gaussian")
    points = {m: [{"epsilon": e, "share_unchanged": s} for e, s in readability.points(m)]
              for m in mechanisms}  # fmt: skip
    grid = sorted({0.5, 1.0, 7.3, *(e * f for m in mechanisms for e, _ in
                                    readability.points(m) for f in (0.5, 1.0, 1.37))})  # fmt: skip
    queries = [[m, eps] for m in mechanisms for eps in [*grid, 1e6]]
    spec = tmp_path / "queries.json"
    spec.write_text(json.dumps({"points": points, "queries": queries}))
    run = subprocess.run(
        [node, str(Path(__file__).with_name("run_share.js")),
         str(root / "src" / "privlm" / "service" / "static" / "perturb.js"), str(spec)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    page = json.loads(run.stdout)
    python = [readability.share_unchanged(m, eps) for m, eps in queries]
    assert page == pytest.approx(python, rel=1e-12, abs=1e-15)
    assert len(set(python)) > 10  # the grid spans the points, not one flat end
