"""What perturbation leaves readable: the share of words that come through unchanged at
each ε per word, measured on public English text, and the default ε chosen from it.

Metric-DP word perturbation trades privacy for readability word by word: at a small ε
nearly every word becomes an unrelated one, and the text trains a model poorly; at a large
one nearly every word, names included, comes through. The trade-off is a property of the
mechanism and the vocabulary, not of anyone's data, so it is measured once on public text
(the head of WikiText-2's validation split that ships with privlm) by
``bench/bench_perturb_readability.py`` and shipped as ``readability.json``;
``tests/perturb/test_readability.py`` recomputes points of it. Nothing here reads a
user's text: what the page and ``privlm perturb`` print beside ε is this public figure.

The default ε per word is the smallest one measured at which at least
:data:`READABLE_SHARE` of the words come through, so that a person can still read what
leaves the page; its per-record ε is large, and the docs say so: the per-record promise
comes from the DP training run on the text (docs/service.md, "The page").
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

from privlm.errors import PrivlmError

READABLE_SHARE = 0.75  # of words unchanged: the default ε is the least that keeps this many
FEW_SHARE = 0.25  # at most this many unchanged: the text says little, and trains poorly
MOST_SHARE = 0.9  # at least this many: the step hides next to nothing
DEFAULT_DELTA = 1e-5  # the Gaussian mechanism's δ per word, by default
TABLE = Path(__file__).with_name("readability.json")


@cache
def measured() -> dict[str, Any]:
    """The shipped measurement: per mechanism, [ε, share of words unchanged] points."""
    return dict(json.loads(TABLE.read_text()))


def points(mechanism: str) -> list[tuple[float, float]]:
    try:
        rows = measured()["mechanisms"][mechanism]["points"]
    except KeyError:
        raise PrivlmError(f"unknown mechanism {mechanism!r}; choose laplace or gaussian") from None
    return [(float(e), float(s)) for e, s in rows]


def default_epsilon(mechanism: str) -> float:
    """The least ε per word measured at which :data:`READABLE_SHARE` of words survive."""
    for eps, share in points(mechanism):
        if share >= READABLE_SHARE:
            return eps
    return points(mechanism)[-1][0]


def share_unchanged(mechanism: str, epsilon: float) -> float:
    """The share of words that come through unchanged at ``epsilon``, interpolated
    linearly between the measured points (0 or the last share beyond them)."""
    pts = points(mechanism)
    if epsilon <= pts[0][0]:
        return pts[0][1] * epsilon / pts[0][0]
    for (e0, s0), (e1, s1) in itertools.pairwise(pts):
        if epsilon <= e1:
            return s0 + (s1 - s0) * (epsilon - e0) / (e1 - e0)
    return pts[-1][1]


def trade_off(mechanism: str, epsilon: float) -> str:
    """One line: how much of a text stays readable at ``epsilon``, and what that means."""
    share = share_unchanged(mechanism, epsilon)
    line = (
        f"at ε = {epsilon:g} per word about {share:.0%} of words come through unchanged "
        "(measured on public English text, WikiText-2)"
    )
    if share <= FEW_SHARE:
        return line + ": the text will read as unrelated words and train a model poorly"
    if share >= MOST_SHARE:
        return line + ": this step hides next to nothing, names included"
    return line + ": the text stays readable, names and numbers among what comes through"


def measure_share(
    mechanism: str, epsilon: float, lines: list[str], seed: int, delta: float = DEFAULT_DELTA
) -> float:
    """The share of ``lines``' words that come through unchanged (case folded, as the
    vocabulary is) at ``epsilon``, with noise from ``seed``: a measurement on public text,
    reproducible on purpose."""
    from privlm.perturb import load_glove, make_mechanism, perturb_text, tokenize
    from privlm.perturb.uniforms import UniformSource

    mech = make_mechanism(mechanism, epsilon, delta if mechanism == "gaussian" else None)
    out = perturb_text("\n".join(lines), load_glove(), mech, UniformSource(seed))
    before = [w.lower() for line in lines for w in tokenize(line)]
    after = [w for line in out.text.split("\n") for w in line.split(" ") if w]
    if len(before) != len(after):
        raise PrivlmError("perturbation changed the number of words")  # never: one per word
    return sum(a == b for a, b in zip(before, after, strict=True)) / max(len(before), 1)
