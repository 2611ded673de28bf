"""Cost per released token of drawing privacy randomness from the OS CSPRNG.

Per token, PMixED draws its Poisson subset of N models and samples one token from the
mixture over the vocabulary; SubMix samples one token. privlm draws both from ``os.urandom``
(``PrivacyRandomness()``). The baseline, in the same run, is the same code on numpy's PCG64
(``PrivacyRandomness(seed=0)``, what a seeded experiment uses). Vocabulary: SmolLM2's 49,152.

Usage: python bench/bench_randomness.py [--tokens 2000] [--models 80] [--sample-rate 0.03]
Writes bench/results/randomness.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from privlm.randomness import PrivacyRandomness

RESULTS = Path(__file__).parent / "results"
VOCAB = 49_152


def per_token(rng: PrivacyRandomness, log_probs: np.ndarray, models: int, q: float) -> dict:
    tokens = len(log_probs)
    t = time.perf_counter()
    for _ in range(tokens):
        rng.bernoulli(models, q)
    subset = (time.perf_counter() - t) / tokens
    t = time.perf_counter()
    for lp in log_probs:
        rng.categorical(lp)
    token = (time.perf_counter() - t) / tokens
    return {"subset_us": subset * 1e6, "token_us": token * 1e6, "pmixed_us": (subset + token) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--models", type=int, default=80)
    ap.add_argument("--sample-rate", type=float, default=0.03)
    a = ap.parse_args()
    log_probs = np.random.default_rng(0).standard_normal((a.tokens, VOCAB)) * 3
    sources = {"pcg64 (seeded baseline)": PrivacyRandomness(seed=0),
               "os.urandom (default)": PrivacyRandomness()}  # fmt: skip
    res = {
        name: per_token(rng, log_probs, a.models, a.sample_rate) for name, rng in sources.items()
    }
    base, ours = res["pcg64 (seeded baseline)"], res["os.urandom (default)"]
    for k in ("subset_us", "token_us", "pmixed_us"):
        ours[k.replace("_us", "_ratio")] = ours[k] / base[k]
    out = {"tokens": a.tokens, "models": a.models, "sample_rate": a.sample_rate, "vocab": VOCAB,
           "results": res}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "randomness.json").write_text(json.dumps(out, indent=2))
    for name, r in res.items():
        print(f"{name:<24} subset {r['subset_us']:7.1f} µs  token {r['token_us']:7.1f} µs  "
              f"PMixED per token {r['pmixed_us']:7.1f} µs")  # fmt: skip
    print(f"os.urandom / PCG64: subset {ours['subset_ratio']:.2f}×, token "
          f"{ours['token_ratio']:.2f}×, PMixED per token {ours['pmixed_ratio']:.2f}×")  # fmt: skip
    print(f"wrote {RESULTS / 'randomness.json'}")


if __name__ == "__main__":
    main()
