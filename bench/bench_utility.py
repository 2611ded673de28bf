"""Utility of private prediction on WikiText-2 with SmolLM2-135M.

Trains, on the same slice of WikiText-2 train: one fine-tuned adapter on all of it (the
non-private reference), a PMixED ensemble of N adapters, a SubMix ensemble of k parts × 2
halves, and one DP-SGD adapter at ε = 8, δ = 1e-5 (the comparison the PMixED paper makes);
then measures test perplexity on the same held-out tokens (every token one query) for: the
public model, the fine-tuned model, DP-SGD, the plain ensemble average (non-private), PMixED
(ε = 8, δ = 1e-5, α = 3, T = the tokens scored) under its per-unit bound, and SubMix
(ε = 2, α = 2, β = ε/T). Reports the share of the public → fine-tuned perplexity gap each
method closes, PMixED's median λ (the weight its mixture gives the fine-tuned models), and
training times. Trained models are cached under the privlm cache, so a rerun only scores.

Usage: python bench/bench_utility.py [--records 1200] [--n 80] [--q 0.03] [--k 8] [--blocks 8]
Writes bench/results/utility.json (or --out).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import hashlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis.pmixed import PER_UNIT_BOUNDS
from privlm.data import corpora
from privlm.models.perplexity import token_blocks
from privlm.predict import PMixED, PMixEDConfig, SubMixConfig, pmixed_rule
from privlm.predict.config import PlainConfig
from privlm.predict.engine import EnsembleEngine
from privlm.predict.evaluate import evaluate
from privlm.predict.factory import build_predictor, plain_config
from privlm.predict.loading import load_adapter, load_ensemble
from privlm.predict.pmixed_rule import pmixed_mixture, sample_members
from privlm.settings import cache_dir
from privlm.training.config import EnsembleConfig
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.ensemble import ensemble_statistics, train_ensemble
from privlm.training.lora_finetune import LoraTrainingConfig

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
EPSILON, DELTA = 8.0, 1e-5


class LambdaRecordingPMixED(PMixED):
    """PMixED that keeps every λ its mixture used (for the median λ; nothing else changes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lambdas: list[float] = []

    def release(self, log_probs_all: torch.Tensor) -> torch.Tensor:
        members = sample_members(self.rng, self.engine.n_adapters, self.config.sample_rate)
        mix = pmixed_mixture(
            log_probs_all[1:], log_probs_all[0], self.config.alpha, self.radius, members,
            lambda_cap=self.config.lambda_cap,
        )  # fmt: skip
        self.lambdas.extend(mix.lambdas[members].tolist())  # the sampled members' weights
        return mix.log_probs


def train_all(args: argparse.Namespace, train: Any, root: Path) -> dict[str, Any]:
    cfg = LoraTrainingConfig(epochs=1, block_size=128, batch_size=4, learning_rate=2e-3)
    times: dict[str, Any] = {}
    families = [("finetuned", 1, "pmixed"), (f"pmixed-{args.n}", args.n, "pmixed")]
    if not args.pmixed_only:
        families.append((f"submix-{args.k}", args.k, "submix"))
    for name, parts, protocol in families:
        t = time.perf_counter()
        m = train_ensemble(
            MODEL, train, root / name, EnsembleConfig(parts=parts, protocol=protocol, training=cfg)
        )
        stats = ensemble_statistics(root / name)["adapters"]
        times[name] = {
            "adapters": len(m.adapters),
            "train_seconds": sum(a["seconds"] for a in stats.values()),
            "this_run_seconds": time.perf_counter() - t,
        }
    dp_dir = root / f"dpsgd-eps{EPSILON:g}"
    if args.pmixed_only:
        return times
    if not (dp_dir / "privacy.json").is_file():
        t = time.perf_counter()
        dp_cfg = DpSgdConfig(
            target_epsilon=EPSILON, delta=DELTA, epochs=args.dpsgd_epochs, batch_size=64,
            physical_batch_size=8, block_size=128, learning_rate=2e-3,
        )  # fmt: skip
        train_dpsgd(MODEL, train, dp_dir, dp_cfg)
        (dp_dir / "seconds.json").write_text(json.dumps(time.perf_counter() - t))
    times["dpsgd"] = {
        "adapters": 1,
        "train_seconds": json.loads((dp_dir / "seconds.json").read_text()),
        "privacy": json.loads((dp_dir / "privacy.json").read_text()),
    }
    return times


class SharedLambdas:
    """λ is a function of a member's distribution, the public one and the radius, never of
    the subset (docs/sharp_edges.md), so the deployments at one q scored on one token share
    one solve of every member's λ (80 members take about 0.7 s a token here); their subsets,
    mixtures, samples and charges stay their own. A benchmark's shortcut: installed over
    ``pmixed_rule.pmixed_lambdas`` for the sweep only."""

    def __init__(self) -> None:
        self.solve = pmixed_rule.pmixed_lambdas
        self._memo: dict[tuple[bytes, float, float], torch.Tensor] = {}

    def __call__(self, log_p: torch.Tensor, x0: torch.Tensor, order: float, radius: float,
                 tol: float) -> torch.Tensor:  # fmt: skip
        # every 61st column of every row identifies a token's distributions (hashing all
        # 80 × 49,152 float64 for each deployment would cost more than the mixing)
        digest = hashlib.blake2b(log_p[:, ::61].double().numpy().tobytes(), digest_size=16)
        digest.update(x0[::61].numpy().tobytes())
        key = (digest.digest(), order, radius)
        if key not in self._memo:
            if len(self._memo) > 65536:  # a block's tokens at every q fit many times
                self._memo.clear()
            self._memo[key] = self.solve(log_p, x0, order, radius, tol)
        return self._memo[key]

    def __enter__(self) -> SharedLambdas:
        pmixed_rule.pmixed_lambdas = self  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        pmixed_rule.pmixed_lambdas = self.solve


class SharedForward:
    """An engine whose last forward pass is reused: every PMixED configuration scored on a
    block (each q, each run) asks for the same logits of every member and the public model,
    computed once (an 80-member forward pass per block costs about a minute here); the
    mixing, the sampling and the charges stay each configuration's own."""

    def __init__(self, engine: EnsembleEngine) -> None:
        self.engine = engine
        self._key: tuple[bytes, bytes] | None = None
        self._out: Any = None

    def logits(self, ids: torch.Tensor, rows: torch.Tensor) -> Any:
        key = (ids.numpy().tobytes(), rows.numpy().tobytes())
        if key != self._key:
            self._key, self._out = None, None  # the last block's logits go before the next's
            self._out = self.engine.logits(ids, rows)
            self._key = key
        return self._out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def pmixed_predictor(
    engine: Any, tokenizer: Any, ledger: Path, q: float, queries: int, cap: float = 1.0,
    alpha: int = 3,
) -> LambdaRecordingPMixED:  # fmt: skip
    """PMixED (ε = 8, δ = 1e-5, order ``alpha``, 3 unless a grid asks) under the per-unit
    bound, with its own budget and fresh subsets, λ capped at ``cap``."""
    led = PrivacyLedger(ledger, "pm", Budget(EPSILON, DELTA))
    cfg = PMixEDConfig(
        epsilon=EPSILON, delta=DELTA, alpha=alpha, queries=queries, sample_rate=q,
        bound=PER_UNIT_BOUNDS[0], lambda_cap=cap,
    )  # fmt: skip
    return LambdaRecordingPMixED(engine, tokenizer, led, cfg)


def return_freed_memory() -> None:
    """Give the heap's freed pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Scoring frees two float64 vocabulary vectors per token from several
    threads' heaps, and without a trim the process grew by about 100 MB a block until the
    out-of-memory killer stopped a 40-block run (docs/results.md, "At the user level")."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, loaded once (None without glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6").malloc_trim
    return None


def score_together(
    predictors: dict[str, LambdaRecordingPMixED], blocks: list[list[int]]
) -> dict[str, dict[str, Any]]:
    """Each predictor's perplexity over ``blocks``, block by block, every predictor on a
    block before the next block (so one forward pass serves them all), with its mixing
    time, radius, λs and ε spent."""
    nll = dict.fromkeys(predictors, 0.0)
    seconds = dict.fromkeys(predictors, 0.0)
    for block in tqdm(blocks, desc="ppl pmixed", unit="block"):
        for name, pm in predictors.items():
            t = time.perf_counter()
            nll[name] -= float(pm.score(block).log_probs.sum())
            seconds[name] += time.perf_counter() - t
        return_freed_memory()
    tokens = sum(len(b) - 1 for b in blocks)
    return {
        name: {
            "perplexity": math.exp(nll[name] / tokens),
            "radius": pm.radius,
            "median_lambda": statistics.median(pm.lambdas) if pm.lambdas else 0.0,
            "mean_lambda": statistics.fmean(pm.lambdas) if pm.lambdas else 0.0,
            "epsilon_spent": pm.ledger.spent().epsilon,
            "seconds": seconds[name],
        }
        for name, pm in predictors.items()
    }


def q_sweep(
    engine: EnsembleEngine, tokenizer: Any, blocks: list[list[int]], rates: list[float],
    runs: int, tmp: Path, caps: tuple[float, ...] = (1.0,), budget_queries: int | None = None,
    alphas: tuple[int, ...] = (3,),
) -> list[dict[str, Any]]:  # fmt: skip
    """PMixED under the per-unit bound at each sampling rate q, λ cap and Rényi order α,
    ``runs`` deployments each (each with its own budget and fresh subsets), scored on one
    shared forward pass per block: the perplexity's mean and standard deviation, the radius
    and the median λ. (Time per token is bench_prediction's: the work per query is the same
    at every q, every member being solved while the subset is secret.) ``budget_queries``:
    the T each budget is planned for (default: the tokens scored), so that settings chosen on
    a shorter validation text see the test deployment's radius."""
    shared, queries = SharedForward(engine), sum(len(b) - 1 for b in blocks)
    planned = budget_queries or queries
    settings = [(q, cap, a) for q in rates for cap in caps for a in alphas]
    predictors = {
        f"{q}/{cap}/{a}/{run}": pmixed_predictor(
            shared, tokenizer, tmp / f"q{q}-c{cap}-a{a}-{run}.db", q, planned, cap, a
        )
        for q, cap, a in settings
        for run in range(runs)
    }  # fmt: skip
    with SharedLambdas():
        scored = score_together(predictors, blocks)
    out = []
    for q, cap, a in settings:
        rows = [scored[f"{q}/{cap}/{a}/{run}"] for run in range(runs)]
        ppls = [r["perplexity"] for r in rows]
        out.append({
            "q": q, "lambda_cap": cap, "alpha": a, "runs": runs, "perplexities": ppls,
            "mean": statistics.fmean(ppls), "sd": statistics.stdev(ppls) if runs > 1 else 0.0,
            "radius": rows[0]["radius"],
            "median_lambda": statistics.fmean(r["median_lambda"] for r in rows),
            "epsilon_spent": max(r["epsilon_spent"] for r in rows),
            "mix_seconds_per_token": statistics.fmean(r["seconds"] for r in rows) / queries,
        })  # fmt: skip
    return out


def parse_alphas(text: str) -> tuple[int, ...]:
    """``--alphas 3,4`` → (3, 4): Rényi orders, each at least 2."""
    alphas = tuple(int(x) for x in text.split(",") if x) or (3,)
    if min(alphas) < 2:
        raise argparse.ArgumentTypeError(f"Rényi orders are integers ≥ 2, not {text!r}")
    return alphas


def parse_caps(text: str) -> tuple[float, ...]:
    """``--caps 1,0.5`` → (1.0, 0.5)."""
    return tuple(float(x) for x in text.split(",") if x) or (1.0,)


def submix_row(
    args: argparse.Namespace, root: Path, blocks: list[list[int]], ppl: dict[str, float]
) -> tuple[float | None, int | None]:
    """SubMix (ε = 2 per part, α = 2, β = ε/T) into ``ppl``; its max part ε and private
    tokens (None, None with --pmixed-only)."""
    if args.pmixed_only:
        return None, None
    queries = sum(len(b) - 1 for b in blocks)
    submix_ensemble = load_ensemble(root / f"submix-{args.k}")
    with tempfile.TemporaryDirectory() as tmp:
        scfg = SubMixConfig(epsilon=2.0, alpha=2.0, beta=2.0 / queries)
        sm = build_predictor(scfg, submix_ensemble, ledger=Path(tmp) / "l.db", name="sm")
        rep = evaluate(sm, blocks)
        ppl["submix"] = rep.perplexity
        return sm.budget()["spent"]["rdp_epsilon"], rep.private_tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1200)
    ap.add_argument("--n", type=int, default=80, help="PMixED ensemble size N")
    ap.add_argument("--q", type=float, default=None, help="PMixED rate (default min(1, 2.4/N))")
    ap.add_argument("--k", type=int, default=8, help="SubMix parts")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--dpsgd-epochs", type=int, default=2)
    ap.add_argument("--out", default="utility.json")
    ap.add_argument(
        "--q-sweep", default="", help="PMixED sampling rates to compare, e.g. 0.03,0.1,0.3,1"
    )
    ap.add_argument("--runs", type=int, default=3, help="deployments per rate (each its own)")
    ap.add_argument(
        "--caps", default="1", help="PMixED λ caps to compare (PMixEDConfig.lambda_cap), e.g. 1,0.5"
    )
    ap.add_argument(
        "--pmixed-only", action="store_true",
        help="train and score only what the q sweep needs: the public model, the fine-tuned "
        "model (the gap), the ensemble and PMixED",
    )  # fmt: skip
    args = ap.parse_args()
    q = args.q if args.q is not None else min(1.0, 2.4 / args.n)
    train = corpora.wikitext2("train")
    train.records = train.records[: args.records]
    root = cache_dir() / "bench" / f"utility-{args.records}"
    times = train_all(args, train, root)

    finetuned = load_ensemble(root / "finetuned")
    lm = finetuned.model
    blocks = token_blocks(
        lm.tokenizer, corpora.wikitext2("test").texts(), args.block_size, args.blocks
    ).tolist()
    queries = sum(len(b) - 1 for b in blocks)
    ppl = {
        method: evaluate(build_predictor(plain_config(method), finetuned), blocks).perplexity
        for method in ("public", "finetuned")
    }
    if not args.pmixed_only:
        dp = load_adapter(root / f"dpsgd-eps{EPSILON:g}", MODEL)  # a fresh model: engines wrap
        ppl["dpsgd"] = evaluate(
            build_predictor(PlainConfig(members="adapter"), dp), blocks
        ).perplexity
    pmixed_ensemble = load_ensemble(root / f"pmixed-{args.n}")
    pm_engine = pmixed_ensemble.engine
    ppl["ensemble"] = evaluate(
        build_predictor(PlainConfig(members="ensemble"), pmixed_ensemble), blocks
    ).perplexity
    rates = sorted({q, *(float(x) for x in args.q_sweep.split(",") if x)})
    with tempfile.TemporaryDirectory() as tmp:
        sweep = q_sweep(
            pm_engine, lm.tokenizer, blocks, rates, args.runs, Path(tmp), parse_caps(args.caps)
        )
    head = next(r for r in sweep if r["q"] == q)  # the configured q (first cap): its first run
    pmixed = {PER_UNIT_BOUNDS[0]: {
        "perplexity": head["perplexities"][0], "radius": head["radius"],
        "median_lambda": head["median_lambda"], "epsilon_spent": head["epsilon_spent"],
    }}  # fmt: skip
    ppl[f"pmixed-{PER_UNIT_BOUNDS[0]}"] = head["mean"]
    sm_eps, sm_private = submix_row(args, root, blocks, ppl)
    gap = ppl["public"] - ppl["finetuned"]
    share = {k: (ppl["public"] - v) / gap if gap else float("nan") for k, v in ppl.items()}
    out = {
        "model": MODEL, "train_records": args.records, "n": args.n, "k": args.k,
        "pmixed_q": q, "test_tokens": queries, "perplexity": ppl, "gap_closed": share,
        "pmixed": pmixed, "q_sweep": sweep, "training": times,
        "submix_epsilon_spent_max_part": sm_eps, "submix_private_tokens": sm_private,
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=2))
    for k, v in ppl.items():
        print(f"{k:<18} perplexity {v:8.3f}   gap closed {share[k]:6.1%}")
    for b, r in pmixed.items():
        print(
            f"PMixED {b:<9} radius {r['radius']:.3f}  median λ {r['median_lambda']:.4f}  "
            f"ε spent {r['epsilon_spent']:.3f} over {queries} queries (q = {q:.3f}, N = {args.n})"
        )
    for row in sweep:
        print(
            f"PMixED q = {row['q']:<5g} λ cap {row['lambda_cap']:<4g} radius {row['radius']:.3f}  perplexity "
            f"{row['mean']:.3f} ± {row['sd']:.3f} ({row['runs']} runs)  gap closed "
            f"{(ppl['public'] - row['mean']) / gap:6.1%}  median λ {row['median_lambda']:.4f}"
        )
    if sm_private is not None:
        print(f"SubMix max part ε {sm_eps:.3f}, {sm_private}/{queries} tokens private")
    print(
        "training seconds: " + ", ".join(f"{k} {v['train_seconds']:.0f}" for k, v in times.items())
    )
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
