"""Which tokens could a screened PMixED release for free? A measurement to choose the screen
(docs/sharp_edges.md, "Screened PMixED"), on the utility benchmark's ensemble and tokens.

On the same WikiText-2 test tokens as ``bench_utility.py`` (its cached N = 80 ensemble and
fine-tuned adapter; run that first), every position is scored under:
- the public model, the fine-tuned model and the plain ensemble average (the ceiling);
- plain PMixED (ε = 8, δ = 1e-5, α = 3, q = 0.03, T = the tokens scored, per unit);
- a **public-confidence screen**: a position is free (the public model's own distribution)
  when the public model's top probability is at least θ, and paid otherwise (PMixED at the
  radius for c = the paid positions). The screen reads the public model and the context
  only, so it is data-independent: its guarantee is PMixED's over c queries, with no
  sparse-vector cost. Also "ceiling" rows: free positions public, paid ones the ensemble
  average (what a perfect paid query could give);
- scale: the same screens when the deployment is budgeted for 100,000 tokens (c = the paid
  share of 100,000; the radius that fits it), against plain PMixED at T = 100,000;
- the TV score TV(p̄, p₀) of the sparse-vector screen, without noise (an oracle: not
  private), to show what a perfect test could sort.

Every row reports the share of the public → fine-tuned gap it closes, in the same run.

Usage: python bench/bench_screening.py [--records 1200] [--blocks 8] [--seed 0]
Writes bench/results/screening.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privlm.data import corpora
from privlm.models.perplexity import token_blocks
from privlm.predict.config import PMixEDConfig
from privlm.predict.engine import upcast_log_softmax
from privlm.predict.loading import load_ensemble
from privlm.predict.pmixed_rule import pmixed_mixture, sample_subset
from privlm.randomness import PrivacyRandomness
from privlm.settings import cache_dir

RESULTS = Path(__file__).parent / "results"
THETAS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
SCALE_TOKENS = 100_000


def public_pass(ensemble: Any, blocks: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(log p₀(y), p₀'s top probability) at every scored position: the screen's input."""
    logp, top = [], []
    for block in blocks:
        with torch.no_grad():
            logits, _ = ensemble.engine.logits(torch.tensor([block]), torch.tensor([-1]))
        lp = torch.log_softmax(logits[0, :-1].double(), -1)
        logp += lp[torch.arange(len(block) - 1), torch.tensor(block[1:])].tolist()
        top += lp.exp().max(-1).values.tolist()
    return np.array(logp), np.array(top)


def full_pass(
    ensemble: Any, finetuned: Any, blocks: list[list[int]],
    runs: dict[str, tuple[PMixEDConfig, np.ndarray]], n: int, seed: int,
) -> dict[str, np.ndarray]:  # fmt: skip
    """At every position: log p_ft(y), log p̄(y), the TV score, and for each PMixED run
    (its config, its paid positions) log p(y) at the paid positions (NaN elsewhere)."""
    rows = torch.tensor([-1, *range(n)])
    radii = {name: cfg.query_cost(n)[0] for name, (cfg, _) in runs.items()}
    rngs = {name: PrivacyRandomness(seed) for name in runs}
    total = sum(len(b) - 1 for b in blocks)
    out = {k: np.full(total, np.nan) for k in ("finetuned", "average", "tv", *runs)}
    i = 0
    for block in blocks:
        with torch.no_grad():
            logits, _ = ensemble.engine.logits(torch.tensor([block] * len(rows)), rows)
            ft, _ = finetuned.engine.logits(torch.tensor([block]), torch.tensor([0]))
        ft_lp = torch.log_softmax(ft[0, :-1].double(), -1)
        for t in range(len(block) - 1):
            y = block[t + 1]
            lp = upcast_log_softmax(logits[:, t])
            avg = torch.logsumexp(lp[1:], 0) - math.log(n)
            out["finetuned"][i] = float(ft_lp[t, y])
            out["average"][i] = float(avg[y])
            out["tv"][i] = float(0.5 * (avg.exp() - lp[0].exp()).abs().sum())
            for name, (cfg, paid) in runs.items():
                if paid[i]:
                    subset = sample_subset(rngs[name], n, cfg.sample_rate)
                    mix = pmixed_mixture(lp[1:][subset], lp[0], cfg.alpha, radii[name])
                    out[name][i] = float(mix.log_probs[y])
            i += 1
        del logits
    return out


def perplexity(log_probs: np.ndarray) -> float:
    return float(math.exp(-np.mean(log_probs)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1200)
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0, help="PMixED's subsets (a benchmark)")
    args = ap.parse_args()
    root = cache_dir() / "bench" / f"utility-{args.records}"
    if not (root / f"pmixed-{args.n}" / "manifest.json").is_file():
        raise SystemExit(f"no ensemble in {root}: run bench/bench_utility.py first")
    t0 = time.perf_counter()
    ensemble = load_ensemble(root / f"pmixed-{args.n}")
    finetuned = load_ensemble(root / "finetuned")
    tok = ensemble.model.tokenizer
    blocks = token_blocks(
        tok, corpora.wikitext2("test").texts(), args.block_size, args.blocks
    ).tolist()
    public, top = public_pass(ensemble, blocks)
    tokens = len(public)
    every = np.ones(tokens, bool)
    runs: dict[str, tuple[PMixEDConfig, np.ndarray]] = {
        "pmixed T=tokens": (PMixEDConfig(queries=tokens), every),
        f"pmixed T={SCALE_TOKENS}": (PMixEDConfig(queries=SCALE_TOKENS), every),
    }
    for theta in THETAS:
        paid = top < theta
        c = int(paid.sum())
        if c:
            runs[f"public-confidence θ={theta}"] = (PMixEDConfig(queries=c), paid)
            at_scale = max(1, round(SCALE_TOKENS * c / tokens))
            runs[f"public-confidence θ={theta} at scale"] = (PMixEDConfig(queries=at_scale), paid)
    table = full_pass(ensemble, finetuned, blocks, runs, args.n, args.seed)
    ft, average, tv = table["finetuned"], table["average"], table["tv"]
    ppl = {"public": perplexity(public), "finetuned": perplexity(ft),
           "ensemble": perplexity(average)}  # fmt: skip
    gap = ppl["public"] - ppl["finetuned"]

    def closed(p: float) -> float:
        return (ppl["public"] - p) / gap

    rows: dict[str, dict[str, Any]] = {}
    for name, (cfg, paid) in runs.items():
        mixed = np.where(paid, table[name], public)
        rows[name] = {"perplexity": perplexity(mixed), "paid": cfg.queries,
                      "free_share": float(1 - paid.mean()), "radius": cfg.query_cost(args.n)[0]}  # fmt: skip
    for theta in THETAS:
        free = top >= theta
        rows[f"ceiling θ={theta} (not private)"] = {
            "perplexity": perplexity(np.where(free, public, average)),
            "paid": int((~free).sum()), "free_share": float(free.mean()),
        }  # fmt: skip
    oracle = {}
    for tau in (0.05, 0.1, 0.2, 0.3):
        free = tv < tau
        oracle[f"tv<{tau}"] = {
            "free_share": float(free.mean()),
            "ceiling_perplexity": perplexity(np.where(free, public, average)),
        }
    for r in rows.values():
        r["gap_closed"] = closed(r["perplexity"])
    for o in oracle.values():
        o["ceiling_gap_closed"] = closed(o["ceiling_perplexity"])
    out = {
        "test_tokens": tokens, "n": args.n, "epsilon": PMixEDConfig().epsilon, "delta": PMixEDConfig().delta,
        "perplexity": ppl, "gap_closed": {k: closed(v) for k, v in ppl.items()},
        "screens": rows, "tv_oracle_not_private": oracle,
        "tv_quantiles": np.quantile(tv, [0.1, 0.25, 0.5, 0.75, 0.9]).tolist(),
        "top_quantiles": np.quantile(top, [0.1, 0.25, 0.5, 0.75, 0.9]).tolist(),
        "seconds": time.perf_counter() - t0,
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "screening.json").write_text(json.dumps(out, indent=2))
    for k, v in ppl.items():
        print(f"{k:<36} perplexity {v:8.3f}   gap closed {closed(v):6.1%}")
    for k, r in rows.items():
        extra = f"  free {r['free_share']:.0%}" if "free_share" in r else ""
        print(f"{k:<36} perplexity {r['perplexity']:8.3f}   gap closed {r['gap_closed']:6.1%}  "
              f"paid c = {r['paid']}{extra}")  # fmt: skip
    for k, o in oracle.items():
        print(f"oracle {k:<29} free {o['free_share']:.0%}  ceiling gap closed "
              f"{o['ceiling_gap_closed']:6.1%} (not private)")  # fmt: skip
    print(f"TV score quantiles (10/25/50/75/90 %): {np.round(out['tv_quantiles'], 3).tolist()}")
    print(f"wrote {RESULTS / 'screening.json'} in {out['seconds']:.0f}s")


if __name__ == "__main__":
    main()
