"""Speed and memory of private generation with the batched ensemble engine (SmolLM2-135M).

Measured in one run, so every figure has its baseline beside it:
- public: the public model alone, KV-cached decoding (the floor);
- engine: PMixED through privlm's batched engine (public + adapters in one forward pass);
- screened: screened PMixED through the same engine (every member evaluated at every step,
  since its score reads them all; a locked ledger transaction per token for its test);
- subset-only: the work before it stopped depending on the secret Poisson subset (only the
  sampled members evaluated and solved): what the subset-independent work costs against it;
- loop: the same adapters evaluated one by one (PEFT ``set_adapter`` + a forward pass each,
  each adapter with its own KV cache), the way reference implementations do it;
- in-context (``--in-context-only``): N members that are 256-token prompts, a request on a
  fresh engine (which encodes every member prompt, as each request once did) against the
  same request on an engine that kept the prompts' keys and values.

Adapters are randomly initialised LoRA (rank 4, every projection): speed does not depend on
what they learned. Each configuration decodes the same prompt for ``--tokens`` steps.

Usage: python bench/bench_prediction.py [--tokens 16] [--loop-n 16] [--in-context-only]
Writes bench/results/prediction.json (prediction_in_context.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import DynamicCache

from privlm.accounting import Budget, PrivacyLedger
from privlm.models import load_public_model
from privlm.predict import EnsembleEngine, PMixED, PMixEDConfig
from privlm.predict.config import ScreenedPMixEDConfig
from privlm.predict.engine import CachedDecoder
from privlm.predict.pmixed_rule import pmixed_mixture
from privlm.predict.sampling import sample
from privlm.predict.screened import ScreenedPMixED
from privlm.randomness import PrivacyRandomness
from privlm.settings import cache_dir
from privlm.training.lora_targets import discover_lora_targets

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
PROMPT = "The history of the city begins in the early medieval period, when a small settlement grew"


def adapters(n: int) -> list[Path]:
    root = cache_dir() / "bench" / "random-adapters"
    paths = [root / f"a{i:03d}" for i in range(n)]
    for i, p in enumerate(paths):
        if not (p / "adapter_config.json").is_file():
            lm = load_public_model(MODEL)
            torch.manual_seed(i)
            cfg = LoraConfig(
                r=4,
                lora_alpha=32,
                target_modules=discover_lora_targets(lm.model),
                init_lora_weights=False,
            )
            get_peft_model(lm.model, cfg).save_pretrained(p)
    return paths


def time_public(tokens: int) -> float:
    lm = load_public_model(MODEL)
    ids = lm.tokenizer(PROMPT, return_tensors="pt").input_ids
    cache = DynamicCache()
    with torch.no_grad():
        out = lm.model(input_ids=ids, past_key_values=cache, use_cache=True)
        t = time.perf_counter()
        for _ in range(tokens):
            tok = torch.multinomial(torch.softmax(out.logits[:, -1], -1), 1)
            out = lm.model(input_ids=tok, past_key_values=cache, use_cache=True)
    return (time.perf_counter() - t) / tokens


def time_engine(n: int, q: float, tokens: int) -> dict[str, float]:
    lm = load_public_model(MODEL)
    engine = EnsembleEngine.from_directories(load_public_model(MODEL).model, adapters(n))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=10_000, sample_rate=q)
        ledger = PrivacyLedger(Path(tmp) / "l.db", "bench", Budget(8.0, 1e-5))
        pm = PMixED(engine, lm.tokenizer, ledger, cfg, seed=0)
        pm.generate(PROMPT, max_new_tokens=2)  # warm-up
        t = time.perf_counter()
        gen = pm.generate(PROMPT, max_new_tokens=tokens)
        per_token = (time.perf_counter() - t) / len(gen.token_ids)
    return {"per_token_s": per_token, "tokens": len(gen.token_ids)}


def time_subset_only(n: int, q: float, tokens: int) -> dict[str, float]:
    """What privlm did before its work stopped depending on the secret subset (a baseline,
    never a mode of privlm: its latency told an empty subset from a full one): subsets drawn
    up front, only the union of their members evaluated and each dropped after its last use,
    λ solved for the sampled members only, p₀ at once for an empty subset."""
    lm = load_public_model(MODEL)
    engine = EnsembleEngine.from_directories(load_public_model(MODEL).model, adapters(n))
    rng = PrivacyRandomness(0)
    radius = PMixEDConfig(sample_rate=q, queries=10_000).query_cost(n)[0]
    ids = lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    subsets = [np.flatnonzero(rng.bernoulli(n, q)).tolist() for _ in range(tokens)]
    last_use = {a: t for t, s in enumerate(subsets) for a in s}
    rows = [-1, *sorted(last_use)]
    t0 = time.perf_counter()
    decoder = CachedDecoder(engine, ids, rows, tokens)
    start = time.perf_counter()
    for t, subset in enumerate(subsets):
        position = {a: i for i, a in enumerate(rows)}
        lp = decoder.last
        sampled = lp[[position[a] for a in subset]]
        token = sample(pmixed_mixture(sampled, lp[0], 3, radius).log_probs, rng)
        kept = [a for a in rows if a < 0 or last_use[a] > t]
        if len(kept) < len(rows):
            decoder.keep([position[a] for a in kept])
            rows = kept
        decoder.advance(token)
    end = time.perf_counter()
    return {"per_token_s": (end - start) / tokens, "prefill_s": start - t0, "tokens": tokens}


def time_screened(n: int, tokens: int) -> dict[str, float]:
    """Screened PMixED over N adapters, c = 10,000 paid tokens at ε = 8."""
    lm = load_public_model(MODEL)
    engine = EnsembleEngine.from_directories(load_public_model(MODEL).model, adapters(n))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = ScreenedPMixEDConfig(paid_tokens=10_000)
        ledger = PrivacyLedger(Path(tmp) / "l.db", "bench", Budget(8.0, 1e-5))
        sp = ScreenedPMixED(engine, lm.tokenizer, ledger, cfg, seed=0)
        sp.generate(PROMPT, max_new_tokens=2)  # warm-up
        t = time.perf_counter()
        gen = sp.generate(PROMPT, max_new_tokens=tokens)
        per_token = (time.perf_counter() - t) / len(gen.token_ids)
    return {"per_token_s": per_token, "tokens": len(gen.token_ids),
            "free_tokens": gen.extra["free_tokens"]}  # fmt: skip


def time_loop(n: int, tokens: int) -> float:
    """Per-token time of evaluating public + n adapters one by one (set_adapter + forward)."""
    lm = load_public_model(MODEL)
    paths = adapters(n)
    model = PeftModel.from_pretrained(
        load_public_model(MODEL).model, paths[0], adapter_name="a0"
    ).eval()
    for i, p in enumerate(paths[1:], start=1):
        model.load_adapter(p, adapter_name=f"a{i}")
    ids = lm.tokenizer(PROMPT, return_tensors="pt").input_ids
    caches = [DynamicCache() for _ in range(n + 1)]
    with torch.no_grad():

        def step(inp: torch.Tensor) -> list[torch.Tensor]:
            outs = []
            with model.disable_adapter():
                outs.append(
                    model(input_ids=inp, past_key_values=caches[0], use_cache=True).logits[:, -1]
                )
            for i in range(n):
                model.set_adapter(f"a{i}")
                outs.append(
                    model(input_ids=inp, past_key_values=caches[i + 1], use_cache=True).logits[
                        :, -1
                    ]
                )
            return outs

        step(ids)
        t = time.perf_counter()
        for _ in range(tokens):
            step(torch.tensor([[42]]))
    return (time.perf_counter() - t) / tokens


def peak_rss_mb(n: int) -> float:
    code = (
        "import resource; from privlm.models import load_public_model; "
        "from privlm.predict import EnsembleEngine; import sys; from pathlib import Path; "
        f"paths=[Path(p) for p in {[str(p) for p in adapters(n)]!r}]; "
        "e=EnsembleEngine.from_directories(load_public_model('smollm2-135m').model, paths); "
        "e.log_probs([1,2,3], [-1, *range(len(paths))]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def time_in_context(n: int, width: int, tokens: int, requests: int = 3) -> dict[str, Any]:
    """PMixED requests over N in-context members of ``width`` prompt tokens each: the first on
    a fresh engine (the prompts encoded inside it), then ``requests`` more on the same engine
    (the prompts' keys and values kept): seconds per request, prefill and decoding."""
    import tempfile

    from privlm.predict.in_context import InContextEngine

    lm = load_public_model(MODEL)
    base = lm.tokenizer(PROMPT * 8, add_special_tokens=False).input_ids
    prompts = [(base[i % 7 :] + base)[:width] for i in range(n)]  # content does not set speed
    engine = InContextEngine(lm.model, prompts, pad_id=0)
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=10_000, sample_rate=1.0)
        ledger = PrivacyLedger(Path(tmp) / "l.db", "bench", Budget(8.0, 1e-5))
        pm = PMixED(engine, lm.tokenizer, ledger, cfg, seed=0)
        for _ in range(1 + requests):
            t = time.perf_counter()
            gen = pm.generate(PROMPT, max_new_tokens=tokens)
            seconds.append(time.perf_counter() - t)
    later = float(np.median(seconds[1:]))
    return {"members": n, "prompt_tokens": width, "tokens": len(gen.token_ids),
            "first_request_s": seconds[0], "later_requests_s": seconds[1:],
            "later_request_median_s": later, "first_over_later": seconds[0] / later}  # fmt: skip


def in_context_only(tokens: int) -> None:
    """A request on a fresh in-context engine against one on a warm engine, one run."""
    res = {"model": MODEL, "threads": torch.get_num_threads(),
           "n80": time_in_context(80, 256, tokens)}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prediction_in_context.json").write_text(json.dumps(res, indent=2))
    r = res["n80"]
    print(
        f"in-context PMixED N=80, 256-token member prompts, {r['tokens']} tokens: first request "
        f"{r['first_request_s']:.1f} s (the prompts encoded), later requests "
        f"{r['later_request_median_s']:.1f} s (median): {r['first_over_later']:.1f}× "
    )
    print(f"wrote {RESULTS / 'prediction_in_context.json'}")


def screened_only(public: float, tokens: int) -> None:
    """Screened decoding per token against plain PMixED and the public model, one run."""
    pm = time_engine(80, 0.03, tokens)
    sc = time_screened(80, tokens)
    res = {"model": MODEL, "tokens": tokens, "threads": torch.get_num_threads(),
           "public_per_token_s": public, "engine_n80_q003": pm, "screened_n80": sc,
           "ratios": {"n80_screened_over_pmixed": sc["per_token_s"] / pm["per_token_s"],
                      "n80_screened_over_public": sc["per_token_s"] / public}}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prediction_screened.json").write_text(json.dumps(res, indent=2))
    print(f"public model alone: {public * 1e3:.1f} ms/token")
    print(f"PMixED N=80, q=0.03: {pm['per_token_s'] * 1e3:.1f} ms/token")
    print(
        f"screened PMixED N=80: {sc['per_token_s'] * 1e3:.1f} ms/token = "
        f"{res['ratios']['n80_screened_over_pmixed']:.1f}× PMixED, "
        f"{res['ratios']['n80_screened_over_public']:.1f}× public ({sc['free_tokens']} of "
        f"{sc['tokens']} tokens free)"
    )
    print(f"wrote {RESULTS / 'prediction_screened.json'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--loop-n", type=int, default=16)
    ap.add_argument(
        "--screened-only",
        action="store_true",
        help="public, PMixED N=80 and screened PMixED N=80 only (no loop baselines)",
    )
    ap.add_argument(
        "--in-context-only", action="store_true",
        help="in-context PMixED N=80: a fresh engine's request against a warm engine's",
    )  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.in_context_only:
        in_context_only(args.tokens)
        return
    adapters(80)
    public = time_public(args.tokens)
    if args.screened_only:
        screened_only(public, args.tokens)
        return
    res = {
        "model": MODEL,
        "tokens": args.tokens,
        "threads": torch.get_num_threads(),
        "public_per_token_s": public,
        "engine_n16_all": time_engine(16, 1.0, args.tokens),
        "engine_n80_q003": time_engine(80, 0.03, args.tokens),
        "engine_n80_q1": time_engine(80, 1.0, args.tokens),
        "subset_only_n80_q003": time_subset_only(80, 0.03, args.tokens),
        "screened_n80": time_screened(80, args.tokens),
        "loop_n16_per_token_s": time_loop(args.loop_n, max(4, args.tokens // 4)),
        "loop_n80_per_token_s": time_loop(80, 2),
        "peak_rss_mb_n80": peak_rss_mb(80),
    }
    e16, e80 = res["engine_n16_all"]["per_token_s"], res["engine_n80_q003"]["per_token_s"]
    res["ratios"] = {
        "n16_engine_over_public": e16 / public,
        "n16_loop_over_engine": res["loop_n16_per_token_s"] / e16,
        "n80_engine_over_public": e80 / public,
        "n80_loop_over_engine": res["loop_n80_per_token_s"] / e80,
        "n80_q1_over_q003": res["engine_n80_q1"]["per_token_s"] / e80,
        "n80_constant_work_over_subset_only": e80 / res["subset_only_n80_q003"]["per_token_s"],
        "n80_screened_over_pmixed": res["screened_n80"]["per_token_s"] / e80,
        "n80_screened_over_public": res["screened_n80"]["per_token_s"] / public,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "prediction.json").write_text(json.dumps(res, indent=2))
    r = res["ratios"]
    print(f"public model alone: {public * 1e3:.1f} ms/token ({1 / public:.1f} tokens/s)")
    print(
        f"PMixED N=16, all active: {e16 * 1e3:.1f} ms/token ({1 / e16:.2f} tokens/s) = "
        f"{r['n16_engine_over_public']:.1f}× public; sequential loop {res['loop_n16_per_token_s'] * 1e3:.0f} ms "
        f"→ engine {r['n16_loop_over_engine']:.1f}× faster"
    )
    print(
        f"PMixED N=80, q=0.03: {e80 * 1e3:.1f} ms/token ({1 / e80:.2f} tokens/s) = "
        f"{r['n80_engine_over_public']:.1f}× public; sequential loop {res['loop_n80_per_token_s'] * 1e3:.0f} ms "
        f"→ engine {r['n80_loop_over_engine']:.1f}× faster"
    )
    e80q1, old = res["engine_n80_q1"]["per_token_s"], res["subset_only_n80_q003"]["per_token_s"]
    print(
        f"PMixED N=80, q=1: {e80q1 * 1e3:.1f} ms/token = {r['n80_q1_over_q003']:.2f}× q=0.03 "
        "(the same work: every member solved at every query)"
    )
    print(
        f"subset-only work (before; its latency told the subset): {old * 1e3:.1f} ms/token; "
        f"subset-independent work costs {r['n80_constant_work_over_subset_only']:.2f}× it"
    )
    sc = res["screened_n80"]["per_token_s"]
    print(
        f"screened PMixED N=80: {sc * 1e3:.1f} ms/token = {r['n80_screened_over_pmixed']:.1f}× "
        f"PMixED N=80, {r['n80_screened_over_public']:.1f}× public"
    )
    print(f"peak RSS with N=80 adapters loaded: {res['peak_rss_mb_n80']:.0f} MB")
    print(f"wrote {RESULTS / 'prediction.json'}")


if __name__ == "__main__":
    main()
