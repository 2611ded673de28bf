"""The exact divergence of a whole synthetic text stays within what the run charges
(docs/sharp_edges.md, "DP synthetic text", steps 2 and 3).

Toy members on a small vocabulary stand in for the prompted model: a member's next-token
distribution is any function of its records and the context (the proof allows any), here
random or adversarial (nearly a point mass). Batches come from privlm's own
``plan_batches`` on neighbouring datasets, each token from privlm's own ``pmixed_mixture``
at the run's radius, and every text of ``max_tokens`` tokens is enumerated, so the
divergence between the two distributions of the changed batch's text is exact."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest
import torch

from privlm.data.records import Dataset, Record
from privlm.predict.pmixed_rule import pmixed_mixture
from privlm.synth.batches import plan_batches
from privlm.synth.config import SynthConfig

pytestmark = [pytest.mark.fast, pytest.mark.proof]
V, KEY = 5, "3c" * 16


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


def public(context: tuple[int, ...]) -> torch.Tensor:
    rng = np.random.default_rng(_seed("public", context))
    return torch.log_softmax(torch.tensor(rng.normal(size=V)), -1)


def member(records: tuple[Record, ...], context: tuple[int, ...], kind: str) -> torch.Tensor:
    if not records:
        return public(context)  # a member without records is the public model
    s = _seed("member", tuple(r.text for r in records), context)
    if kind == "adversarial":  # nearly all mass on one token the records pick
        logits = torch.full((V,), -12.0, dtype=torch.float64)
        logits[s % V] = 0.0
        return torch.log_softmax(logits, -1)
    rng = np.random.default_rng(s)
    return torch.log_softmax(torch.tensor(3.0 * rng.normal(size=V)), -1)


def text_distribution(members, cfg: SynthConfig, kind: str) -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.product(range(V), repeat=cfg.max_tokens):
        p = 1.0
        for t in range(cfg.max_tokens):
            ctx = seq[:t]
            log_p = torch.stack([member(m, ctx, kind) for m in members])
            mix = pmixed_mixture(log_p, public(ctx), cfg.order, cfg.radius)
            p *= float(mix.log_probs[seq[t]].exp())
        out[seq] = p
    return out


def renyi(p: dict, q: dict, k: int) -> float:
    total = sum(p[x] ** k * q[x] ** (1 - k) for x in p)
    return float(np.log(total) / (k - 1))


@pytest.mark.parametrize("kind", ["adversarial", "random"])
@pytest.mark.parametrize(("epsilon", "members"), [(8.0, 3), (2.0, 2), (8.0, 1)])
def test_one_text_loses_at_most_its_charge(kind, epsilon, members):
    cfg = SynthConfig(epsilon=epsilon, count=3, max_tokens=2, members=members)
    recs = [Record(f"record {i}", f"r{i}") for i in range(12)]
    removed = 5
    a = plan_batches(Dataset(recs, "mem"), cfg.count, cfg.members, KEY)
    b = plan_batches(
        Dataset(recs[:removed] + recs[removed + 1 :], "mem"), cfg.count, cfg.members, KEY
    )
    changed = [i for i in range(cfg.count) if a[i].members != b[i].members]
    assert len(changed) == 1  # every other text has the same inputs: it loses nothing
    i = changed[0]
    p, q = text_distribution(a[i].members, cfg, kind), text_distribution(b[i].members, cfg, kind)
    assert abs(sum(p.values()) - 1) < 1e-9 and abs(sum(q.values()) - 1) < 1e-9
    charged = cfg.text_curve()
    worst = 0.0
    for k in range(2, cfg.order + 1):
        bound = float(charged.at([float(k)])[0])
        for x, y in ((p, q), (q, p)):
            exact = renyi(x, y, k)
            assert exact <= bound * (1 + 1e-9), (k, exact, bound)
            worst = max(worst, exact / bound)
    assert worst > 1e-3  # the replaced member did move the text: the check is not vacuous
