"""PMixED's λ solve (Eq. 5) on the CPU: the torch bisection against the fused one
(``privlm.predict.ball_kernel``), on the same rows in the same run.

At every token PMixED solves Eq. 5 for all N members over the whole vocabulary (49,152
tokens for SmolLM2), in float64, a fixed number of bisection steps (the same work for every
input). The rows are random log-pmfs: the work does not depend on their values. Each
configuration is timed ``--repeats`` times after a warm-up (which also compiles the fused
solve); the median is reported, with the ratio torch / fused, and the largest difference
between the two solves' λ.

Usage: python bench/bench_ball_solve.py [--members 16,80,300] [--threads 1,2] [--repeats 5]
Writes bench/results/ball_solve.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from cpuinfo import cpu_name

from privlm.predict import ball_kernel
from privlm.predict.mollifier import pmixed_lambdas

VOCAB = 49_152  # SmolLM2's
ORDER, RADIUS = 6.0, 0.376  # 2α at α = 3; the user-level benchmark's radius at N = 80


def timed(log_p: torch.Tensor, log_p0: torch.Tensor, repeats: int) -> tuple[float, torch.Tensor]:
    lam = pmixed_lambdas(log_p, log_p0, ORDER, RADIUS)  # warm-up (compiles the fused solve)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        lam = pmixed_lambdas(log_p, log_p0, ORDER, RADIUS)
        times.append(time.perf_counter() - t)
    return statistics.median(times), lam


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", default="16,80,300")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="ball_solve.json")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    log_p0 = torch.log_softmax(3 * torch.randn(VOCAB, generator=gen), -1)
    rows: list[dict[str, Any]] = []
    for threads in (int(x) for x in args.threads.split(",")):
        torch.set_num_threads(threads)
        for n in (int(x) for x in args.members.split(",")):
            noise = torch.randn(n, VOCAB, generator=gen)
            log_p = torch.log_softmax(log_p0 + noise, -1).float()
            fused_s, fused = timed(log_p, log_p0, args.repeats)
            ball_kernel.MIN_ROWS, saved = 10**9, ball_kernel.MIN_ROWS  # the torch solve
            try:
                torch_s, reference = timed(log_p, log_p0, args.repeats)
            finally:
                ball_kernel.MIN_ROWS = saved
            diff = float((fused - reference).abs().max())
            rows.append({
                "members": n, "threads": threads, "torch_seconds": torch_s,
                "fused_seconds": fused_s, "speedup": torch_s / fused_s, "max_lambda_diff": diff,
            })  # fmt: skip
            print(
                f"N = {n:4d}, {threads} thread(s): torch {torch_s * 1e3:8.1f} ms, fused "
                f"{fused_s * 1e3:8.1f} ms per token ({torch_s / fused_s:4.1f}×), "
                f"largest λ difference {diff:.1e}"
            )
    out = Path(__file__).parent / "results" / args.out
    out.write_text(json.dumps({
        "vocab": VOCAB, "order": ORDER, "radius": RADIUS, "repeats": args.repeats,
        "cpu": cpu_name(), "torch": torch.__version__,
        "rows": rows,
    }, indent=2) + "\n")  # fmt: skip
    print(f"→ {out}")


if __name__ == "__main__":
    main()
