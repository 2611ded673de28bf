"""Screened PMixED against DP-SGD, plain PMixED, the ensemble average and the public model,
at ε = 8, δ = 1e-5, on the utility benchmark's ensemble (N = 80, q = 0.03) and adapters.

Two slices of WikiText-2 test, in one run (one forward pass over the larger):
- **small**: the 1,016 tokens of ``bench_utility.py`` (its first 8 blocks of 128). Plain
  PMixED is budgeted for T = 1,016; screened PMixED for c paid tokens (a small grid of c
  and τ), free tokens unbounded;
- **scale**: ``--blocks`` blocks (79: 10,112 tokens) scored by deployments budgeted for
  100,000 tokens: plain PMixED at T = 100,000, and screened PMixED with c paid tokens sized
  for 100,000 tokens (c = 100,000 × the paid share it expects).

Screened PMixED runs through the real predictor (:class:`privlm.predict.screened.
ScreenedPMixED`, its durable ledger and its sparse-vector test, seeded for the benchmark) on
the log-probabilities of the same forward pass as every baseline; plain PMixED draws its
subsets and mixtures with the same functions as its predictor. The public-confidence screen
(a data-independent screen: free when the public model's top probability is ≥ θ) and the
noiseless TV oracle (not private) are kept from the first measurement, on the small slice.
Every row reports the share of the public → fine-tuned perplexity gap it closes.

Usage: python bench/bench_screening.py [--records 1200] [--blocks 79] [--seed 0]
Needs the ensemble, fine-tuned and DP-SGD adapters of bench/bench_utility.py (run it first).
Writes bench/results/screening.json.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from privlm.data import corpora
from privlm.models.perplexity import token_blocks
from privlm.predict.config import PMixEDConfig, ScreenedPMixEDConfig
from privlm.predict.engine import upcast_log_softmax
from privlm.predict.factory import build_predictor
from privlm.predict.loading import load_adapter, load_ensemble
from privlm.predict.pmixed_rule import pmixed_mixture, sample_members
from privlm.predict.screened import ScreenedPMixED, tv_score
from privlm.randomness import PrivacyRandomness
from privlm.settings import cache_dir

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
SMALL_BLOCKS = 8  # bench_utility's 1,016 tokens
SCALE_TOKENS = 100_000
SMALL_SCREENS = [(128, 0.15), (128, 0.3), (512, 0.15), (512, 0.3)]  # (c, τ)
SCALE_SCREENS = [(50_000, 0.2), (25_000, 1.0), (10_000, 3.0)]
THETAS = (0.3, 0.5, 0.8)


@dataclass
class Run:
    """One way of answering, scored on the positions of its slice."""

    name: str
    small_only: bool
    log_probs: list[float] = field(default_factory=list)
    free: int = 0
    paid: int = 0
    spent: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class PlainPMixED:
    """Plain PMixED's release at every position (its predictor's subsets and mixture)."""

    def __init__(self, cfg: PMixEDConfig, n: int, seed: int) -> None:
        self.cfg, self.n = cfg, n
        self.radius = cfg.query_cost(n)[0]
        self.rng = PrivacyRandomness(seed)

    def answer(self, lp: torch.Tensor) -> tuple[str, torch.Tensor]:
        members = sample_members(self.rng, self.n, self.cfg.sample_rate)
        mix = pmixed_mixture(lp[1:], lp[0], self.cfg.alpha, self.radius, members)
        return "paid", mix.log_probs


class Screened:
    def __init__(self, predictor: ScreenedPMixED) -> None:
        self.predictor = predictor

    def answer(self, lp: torch.Tensor) -> tuple[str, torch.Tensor]:
        ans = self.predictor.answer(lp)
        assert ans.log_probs is not None
        return ans.kind, ans.log_probs


def perplexity(log_probs: list[float] | np.ndarray) -> float:
    return float(math.exp(-np.mean(log_probs)))


def single_row(loaded: Any, block: list[int]) -> list[float]:
    """log p(y) of every scored position under one adapter (row 0) or the public model."""
    with torch.no_grad():
        logits, _ = loaded.engine.logits(torch.tensor([block]), torch.tensor([0]))
    lp = torch.log_softmax(logits[0, :-1].double(), -1)
    return lp[torch.arange(len(block) - 1), torch.tensor(block[1:])].tolist()


def build_runs(
    ensemble: Any, n: int, small_tokens: int, tmp: Path, seed: int
) -> dict[str, tuple[Run, Any]]:
    runs: dict[str, tuple[Run, Any]] = {}

    def add(run: Run, how: Any) -> None:
        runs[run.name] = (run, how)

    plain_small = PMixEDConfig(queries=small_tokens)
    plain_scale = PMixEDConfig(queries=SCALE_TOKENS)
    add(Run(f"pmixed T={small_tokens}", True, info={"radius": plain_small.query_cost(n)[0]}),
        PlainPMixED(plain_small, n, seed))  # fmt: skip
    add(Run(f"pmixed T={SCALE_TOKENS}", False, info={"radius": plain_scale.query_cost(n)[0]}),
        PlainPMixED(plain_scale, n, seed))  # fmt: skip
    for scope, grid in (("small", SMALL_SCREENS), ("scale", SCALE_SCREENS)):
        for c, tau in grid:
            cfg = ScreenedPMixEDConfig(paid_tokens=c, threshold=tau, when_spent="public")
            name = f"screened c={c} τ={tau:g} ({scope})"
            predictor = build_predictor(
                cfg, ensemble, ledger=tmp / "screened.db", name=name, seed=seed
            )
            assert isinstance(predictor, ScreenedPMixED)
            test = predictor.test
            add(Run(name, scope == "small", info={
                "paid_tokens_c": c, "threshold": tau, "radius": predictor.radius,
                "instance_epsilon": test.epsilon,
                "laplace_scales": {"threshold": test.threshold_scale, "score": test.query_scale},
            }), Screened(predictor))  # fmt: skip
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1200)
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--blocks", type=int, default=79, help="the scale slice (79: 10,112 tokens)")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0, help="the mechanisms' randomness (a benchmark)")
    args = ap.parse_args()
    root = cache_dir() / "bench" / f"utility-{args.records}"
    if not (root / f"pmixed-{args.n}" / "manifest.json").is_file():
        raise SystemExit(f"no ensemble in {root}: run bench/bench_utility.py first")
    t0 = time.perf_counter()
    ensemble = load_ensemble(root / f"pmixed-{args.n}")
    finetuned = load_ensemble(root / "finetuned")
    dpsgd = load_adapter(root / "dpsgd-eps8", MODEL)
    tok = ensemble.model.tokenizer
    blocks = token_blocks(
        tok, corpora.wikitext2("test").texts(), args.block_size, args.blocks
    ).tolist()
    small_tokens = sum(len(b) - 1 for b in blocks[:SMALL_BLOCKS])
    rows = torch.tensor([-1, *range(args.n)])
    base: dict[str, list[float]] = {
        k: [] for k in ("public", "finetuned", "dpsgd", "ensemble", "tv", "top")
    }
    with tempfile.TemporaryDirectory() as tmp:
        runs = build_runs(ensemble, args.n, small_tokens, Path(tmp), args.seed)
        for b, block in enumerate(tqdm(blocks, desc="blocks", unit="block")):
            small = b < SMALL_BLOCKS
            base["finetuned"] += single_row(finetuned, block)
            base["dpsgd"] += single_row(dpsgd, block)
            with torch.no_grad():
                logits, _ = ensemble.engine.logits(torch.tensor([block] * len(rows)), rows)
            for t in range(len(block) - 1):
                y = block[t + 1]
                lp = upcast_log_softmax(logits[:, t])
                avg = torch.logsumexp(lp[1:], 0) - math.log(args.n)
                base["public"].append(float(lp[0, y]))
                base["ensemble"].append(float(avg[y]))
                base["tv"].append(tv_score(lp))
                base["top"].append(float(lp[0].max().exp()))
                for run, how in runs.values():
                    if run.small_only and not small:
                        continue
                    kind, out = how.answer(lp)
                    run.log_probs.append(float(out[y]))
                    setattr(run, kind, getattr(run, kind) + 1)
            del logits
        arrays = {k: np.array(v) for k, v in base.items()}
        out = report(arrays, runs, small_tokens, args)
    out["seconds"] = time.perf_counter() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "screening.json").write_text(json.dumps(out, indent=2))
    show(out)
    print(f"wrote {RESULTS / 'screening.json'} in {out['seconds']:.0f}s")


def report(a: dict[str, np.ndarray], runs: dict[str, tuple[Run, Any]], small_tokens: int,
           args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"model": MODEL, "n": args.n, "epsilon": 8.0, "delta": 1e-5,
                           "sample_rate": 0.03, "seed": args.seed}  # fmt: skip
    for scope, end in (("small", small_tokens), ("scale", len(a["public"]))):
        ppl = {k: perplexity(a[k][:end]) for k in ("public", "finetuned", "dpsgd", "ensemble")}
        gap = ppl["public"] - ppl["finetuned"]
        table: dict[str, Any] = {
            k: {"perplexity": v, "gap_closed": (ppl["public"] - v) / gap} for k, v in ppl.items()
        }
        for run, _ in runs.values():
            if run.small_only != (scope == "small"):
                continue
            v = perplexity(run.log_probs)
            scored = len(run.log_probs)
            table[run.name] = {
                "perplexity": v, "gap_closed": (ppl["public"] - v) / gap,
                "free_share": run.free / scored, "paid_used": run.paid,
                "public_after_spent": run.spent, **run.info,
            }  # fmt: skip
        if scope == "small":
            public, average, top, tv = (a[k][:end] for k in ("public", "ensemble", "top", "tv"))
            for theta in THETAS:
                free = top >= theta
                table[f"ceiling: public-confidence θ={theta} free, else ensemble (not private)"] = {
                    "perplexity": perplexity(np.where(free, public, average)),
                    "free_share": float(free.mean()),
                }
            for tau in (0.1, 0.2):
                free = tv < tau
                table[f"oracle: TV<{tau} free, else ensemble (not private)"] = {
                    "perplexity": perplexity(np.where(free, public, average)),
                    "free_share": float(free.mean()),
                }
            for row in table.values():
                row.setdefault("gap_closed", (ppl["public"] - row["perplexity"]) / gap)
        out[scope] = {"tokens": int(end), "rows": table}
    out["tv_quantiles"] = np.quantile(a["tv"], [0.1, 0.25, 0.5, 0.75, 0.9]).tolist()
    return out


def show(out: dict[str, Any]) -> None:
    for scope in ("small", "scale"):
        print(f"\n{scope}: {out[scope]['tokens']} WikiText-2 test tokens, ε = 8, δ = 1e-5")
        for name, r in out[scope]["rows"].items():
            extra = ""
            if "free_share" in r:
                extra = f"  free {r['free_share']:.0%}"
            if "paid_used" in r:
                extra += f"  paid {r['paid_used']}"
                if "paid_tokens_c" in r:
                    extra += f" of c={r['paid_tokens_c']}"
            print(
                f"  {name:<66} ppl {r['perplexity']:8.3f}  gap closed {r['gap_closed']:6.1%}{extra}"
            )
    print(f"TV score quantiles (10/25/50/75/90 %): {np.round(out['tv_quantiles'], 3).tolist()}")


if __name__ == "__main__":
    main()
