"""Where a PMixED token's time goes on a GPU: torch.profiler over a few tokens at 1B.

    python bench/profile_pmixed_gpu.py [--model llama-3.2-1b] [--tokens 16] [--compare-gather]
Prints the operators by device time and by host time (self), the per-token wall time of the
public model and of PMixED beside it, and the per-token costs that do not depend on the
model (the float64 log-softmax, the λ solve and mixture, the ledger's durable charge).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpu import (
    WordTokenizer,
    build_model,
    gathering,
    prompt_text,
    public_per_token,
    random_adapters,
    sync,
    timed_generation,
)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--adapters", type=int, default=80)
    ap.add_argument("--compare-gather", action="store_true", help="Also time the gathering path.")
    args = ap.parse_args()
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict import EnsembleEngine, PMixED, PMixEDConfig

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(args.model, device, dtype)
    tok = WordTokenizer(model.config.vocab_size)
    text = prompt_text(512)
    ids = tok(text)["input_ids"]
    public_per_token(model, ids, 16)
    public = public_per_token(model, ids, 32)
    adapters, spec = random_adapters(model, args.adapters, 8)
    engine = EnsembleEngine(model, adapters, spec)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=10**6, sample_rate=0.03)
        pm = PMixED(engine, tok, PrivacyLedger(Path(tmp) / "l.db", "p", Budget(8, 1e-5)), cfg)
        pm.generate(text, max_new_tokens=16)
        t = time.perf_counter()
        pm.generate(text, max_new_tokens=32)
        torch.cuda.synchronize() if device.type == "cuda" else None
        mixed = (time.perf_counter() - t) / 32
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            pm.generate(text, max_new_tokens=args.tokens)
        parts = fixed_costs(pm, engine.n_adapters + 1, model.config.vocab_size, device)
        gathered = None
        if args.compare_gather:
            gathered = gathering(lambda: timed_generation(pm, text, 32, device))[0]
    print(f"public {public * 1e3:.1f} ms/token, PMixED {mixed * 1e3:.1f} ms/token "
          f"(with its 512-token prefill)")  # fmt: skip
    if gathered is not None:
        print(f"PMixED on the gathering LoRA path: {gathered * 1e3:.1f} ms/token")
    for name, seconds in parts.items():
        print(f"{name}: {seconds * 1e3:.2f} ms per token")
    avg = prof.key_averages()
    if device.type == "cuda":
        print(avg.table(sort_by="self_cuda_time_total", row_limit=20, max_name_column_width=60))
    print(avg.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


def fixed_costs(pm: Any, rows: int, vocab: int, device: torch.device, reps: int = 20) -> dict:
    """The per-token costs that do not depend on the model: the float64 log-softmax of every
    row, one release (λ solve and mixture over ``rows`` × ``vocab``) and one durable charge."""
    from privlm.predict.engine import upcast_log_softmax

    logits = torch.randn(rows, vocab, device=device, dtype=torch.bfloat16)
    log_probs = upcast_log_softmax(logits)

    def timed(fn: Any) -> float:
        fn()
        sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync(device)
        return (time.perf_counter() - t) / reps

    return {
        "log-softmax (float64, every row)": timed(lambda: upcast_log_softmax(logits)),
        "release (λ solve and mixture)": timed(lambda: pm.release(log_probs)),
        "durable charge (ledger)": timed(pm._charge_one),
    }


if __name__ == "__main__":
    main()
