"""Canary exposure on SmolLM2-135M (JFT §6.4 set-up, the parts privlm has so far).

A random canary "My ID is <6 digits>" (seed 0) is inserted r = 10 times into the first 400 records of
WikiText-2 train. Exposure (exact, over all 10^6 candidates) of: the public model; a
non-private LoRA fine-tune; a DP-SGD LoRA fine-tune at ε = 3 (δ = 1/n^1.1, record level).
Redacted and JFT models join when the secret detectors land.

Usage: python bench/bench_exposure.py   → bench/results/exposure.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from peft import PeftModel

from privlm.audit.exposure import insert_canary, measure_exposure, random_canary
from privlm.data import corpora
from privlm.models import load_public_model
from privlm.settings import cache_dir
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora

RESULTS = Path(__file__).parent / "results"
MODEL, REPEATS = "smollm2-135m", 10
CANARY = random_canary(6, seed=0)  # random, as it must be: 123456 is already rank 1 unseen


def main() -> None:
    data = corpora.wikitext2("train")
    data.records = data.records[:400]
    data = insert_canary(data, CANARY, REPEATS, seed=0)
    root = cache_dir() / "bench" / "exposure"
    results = {}

    def audit(name, model, extra):
        t = time.perf_counter()
        lm = load_public_model(MODEL)
        e = measure_exposure(model, lm.tokenizer, CANARY)
        results[name] = {**e.__dict__, "audit_seconds": time.perf_counter() - t, **extra}
        print(
            f"{name:<12} rank {e.rank:>9,} of {e.candidates:,}  exposure {e.exposure:5.2f}",
            flush=True,
        )

    audit("public", load_public_model(MODEL).model, {})
    t = time.perf_counter()
    cfg = LoraTrainingConfig(epochs=2, block_size=64, batch_size=8, learning_rate=2e-3, pack=False)
    finetune_lora(MODEL, data.texts(), cfg, root / "nonprivate")
    audit(
        "non-private",
        PeftModel.from_pretrained(load_public_model(MODEL).model, root / "nonprivate").eval(),
        {"train_seconds": time.perf_counter() - t},
    )
    t = time.perf_counter()
    st = train_dpsgd(
        MODEL,
        data,
        root / "dpsgd",
        DpSgdConfig(
            target_epsilon=3.0,
            epochs=2,
            batch_size=64,
            physical_batch_size=8,
            block_size=64,
            learning_rate=2e-3,
        ),
    )
    audit(
        "dp-sgd",
        PeftModel.from_pretrained(load_public_model(MODEL).model, root / "dpsgd").eval(),
        {"train_seconds": time.perf_counter() - t, "privacy": st.to_dict()},
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "model": MODEL,
        "canary": f"My ID is {CANARY}",
        "repeats": REPEATS,
        "records": len(data),
        "results": results,
    }
    (RESULTS / "exposure.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'exposure.json'}")


if __name__ == "__main__":
    main()
