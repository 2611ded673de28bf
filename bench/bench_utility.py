"""Utility of private prediction on WikiText-2 with SmolLM2-135M (issue 3 §7, scaled).

Trains, on the same slice of WikiText-2 train: one fine-tuned adapter on all of it, a PMixED
ensemble of N adapters, and a SubMix ensemble of k parts × 2 halves; then measures test
perplexity on the same held-out tokens (every token one query) for: the public model, the
single fine-tuned model, the plain ensemble average (non-private), PMixED (ε = 8, δ = 1e-5,
α = 3, T = the tokens scored) and SubMix (ε = 2, α = 2, β = ε/T). Reports the share of the
public → fine-tuned perplexity gap each method closes, and training times.

Usage: python bench/bench_utility.py [--records 1200] [--n 16] [--k 8] [--blocks 8]
Writes bench/results/utility.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from privlm.accounting import Budget, PrivacyLedger
from privlm.data import corpora
from privlm.models.perplexity import token_blocks
from privlm.predict import PMixED, PMixEDConfig, SubMix, SubMixConfig, part_ledgers
from privlm.predict.evaluate import evaluate
from privlm.predict.factory import plain_predictor
from privlm.predict.loading import load_ensemble
from privlm.settings import cache_dir
from privlm.training.ensemble import train_ensemble
from privlm.training.lora_finetune import LoraTrainingConfig

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1200)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=128)
    args = ap.parse_args()
    train = corpora.wikitext2("train")
    train.records = train.records[: args.records]
    cfg = LoraTrainingConfig(epochs=1, block_size=128, batch_size=4, learning_rate=2e-3)
    root = cache_dir() / "bench" / f"utility-{args.records}"
    times = {}
    for name, parts, protocol in (
        ("finetuned", 1, "pmixed"),
        ("pmixed", args.n, "pmixed"),
        ("submix", args.k, "submix"),
    ):
        t = time.perf_counter()
        m = train_ensemble(MODEL, train, parts, root / name, protocol, cfg)
        times[name] = {
            "adapters": len(m["adapters"]),
            "train_seconds": sum(a["seconds"] for a in m["adapters"].values()),
            "this_run_seconds": time.perf_counter() - t,
        }

    lm, single, _ = load_ensemble(root / "finetuned")
    blocks = token_blocks(
        lm.tokenizer, corpora.wikitext2("test").texts(), args.block_size, args.blocks
    ).tolist()
    queries = sum(len(b) - 1 for b in blocks)
    ppl = {
        "public": evaluate(plain_predictor("public", single, lm.tokenizer), blocks).perplexity,
        "finetuned": evaluate(
            plain_predictor("finetuned", single, lm.tokenizer), blocks
        ).perplexity,
    }
    _, pm_engine, _ = load_ensemble(root / "pmixed")
    ppl["ensemble"] = evaluate(
        plain_predictor("ensemble", pm_engine, lm.tokenizer), blocks
    ).perplexity
    q = min(1.0, 2.4 / args.n)
    with tempfile.TemporaryDirectory() as tmp:
        led = PrivacyLedger(Path(tmp) / "l.db", "pm", Budget(8.0, 1e-5))
        pm = PMixED(pm_engine, lm.tokenizer, led, PMixEDConfig(8.0, 1e-5, 3, queries, q), seed=0)
        t = time.perf_counter()
        ppl["pmixed"] = evaluate(pm, blocks).perplexity
        pm_eps, pm_secs = led.spent().epsilon, time.perf_counter() - t
        _, sm_engine, _ = load_ensemble(root / "submix")
        scfg = SubMixConfig(2.0, 2.0, 2.0 / queries)
        ledgers = part_ledgers(Path(tmp) / "l.db", "sm", args.k, scfg)
        sm = SubMix(sm_engine, lm.tokenizer, ledgers, scfg, seed=0)
        rep = evaluate(sm, blocks)
        ppl["submix"] = rep.perplexity
        sm_eps, sm_private = max(lg.spent().epsilon for lg in ledgers), rep.private_tokens
    gap = ppl["public"] - ppl["finetuned"]
    share = {k: (ppl["public"] - v) / gap if gap else float("nan") for k, v in ppl.items()}
    out = {
        "model": MODEL,
        "train_records": args.records,
        "n": args.n,
        "k": args.k,
        "pmixed_q": q,
        "test_tokens": queries,
        "perplexity": ppl,
        "gap_closed": share,
        "training": times,
        "pmixed_epsilon_spent": pm_eps,
        "pmixed_eval_seconds": pm_secs,
        "submix_epsilon_spent_max_part": sm_eps,
        "submix_private_tokens": sm_private,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "utility.json").write_text(json.dumps(out, indent=2))
    for k in ("public", "finetuned", "ensemble", "pmixed", "submix"):
        print(f"{k:<10} perplexity {ppl[k]:8.3f}   gap closed {share[k]:6.1%}")
    print(
        f"PMixED ε spent {pm_eps:.3f} over {queries} queries (q = {q:.3f}, N = {args.n}); "
        f"SubMix max part ε {sm_eps:.3f}, {sm_private}/{queries} tokens private"
    )
    print(
        "training seconds: " + ", ".join(f"{k} {v['train_seconds']:.0f}" for k, v in times.items())
    )
    print(f"wrote {RESULTS / 'utility.json'}")


if __name__ == "__main__":
    main()
