"""Python and JavaScript perturbation agree with the shared test vectors."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from privlm.perturb import testvectors
from privlm.perturb.vocabulary import load_glove

pytestmark = pytest.mark.fast

JS = Path(testvectors.__file__).parents[1] / "service" / "static" / "perturb.js"
RUNNER = Path(__file__).with_name("run_vectors.js")


@pytest.fixture(scope="module")
def vocab():
    return load_glove(testvectors.VOCABULARY, testvectors.CLIP)


@pytest.fixture(scope="module")
def committed():
    return json.loads(testvectors.PATH.read_text())


def test_python_reproduces_the_committed_vectors(vocab, committed):
    again = testvectors.compute(vocab, committed)
    for want, got in zip(committed["cases"], again["cases"], strict=True):
        assert got["perturbed"] == want["perturbed"]
        assert got["tokens"] == want["tokens"]
        assert got["per_document"] == want["per_document"]
    assert again["calibration"] == committed["calibration"]


def test_javascript_reproduces_the_committed_vectors(vocab, committed, tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to test perturb.js (the Makefile installs it)")
    voc = tmp_path / "vocab.json"
    voc.write_text(
        json.dumps(
            {"words": list(vocab.words), "vectors": vocab.vectors.ravel().tolist(), "dim": 50}
        )
    )
    run = subprocess.run(
        [node, str(RUNNER), str(JS), str(testvectors.PATH), str(voc)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    got = json.loads(run.stdout)
    for want, js in zip(committed["cases"], got["cases"], strict=True):
        assert js["tokens"] == want["tokens"], want["text"]
        assert js["perturbed"] == want["perturbed"], want["mechanism"]
        assert js["words"] == want["words"]
        for key in ("per_document", "per_line_max", "per_word"):
            assert js[key].keys() == want[key].keys(), key
            for k, v in want[key].items():
                assert same(js[key][k], v), (key, k, js[key][k], v)
    for want, js in zip(committed["calibration"], got["calibration"], strict=True):
        for k in ("sigma", "epsilon_back", "epsilon_of_4"):
            assert math.isclose(js[k], want[k], rel_tol=1e-9), (want, k)


def same(got, want) -> bool:
    """Floats within 1e-9 relative (JavaScript's and Python's libm may differ in the last
    bits); every other value exactly."""
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return bool(got == want) and type(got) is type(want)


def test_the_comparison_itself_can_fail():
    assert not same(10.0 + 1e-6, 10.0) and not same("laplace", "gaussian")
    assert not same(11, 12) and same(0.1 + 0.2, 0.3)


def test_the_page_never_uses_math_random():
    static = JS.parent
    for f in static.glob("*.js"):
        assert "Math.random" not in f.read_text(), f
    assert ".getRandomValues(out.subarray(" in JS.read_text()  # the draw itself, not a comment
