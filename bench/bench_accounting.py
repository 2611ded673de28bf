"""Benchmark the accounting layer; every figure is a ratio against a baseline in this run.

1. Theorem C.4 (Poisson amplification, Eq. 12), vectorised in log space, against a scalar
   Python loop over orders and terms (the obvious transcription), on the same curve.
2. ε of a DP-SGD plan: privlm's RDP accountant, and PRV, against Opacus's RDP accountant.
3. Durable ledger charges (one committed SQLite transaction each) against an in-memory
   running sum (the non-durable baseline).

Usage: python bench/bench_accounting.py   (writes bench/results/accounting.json)
"""

from __future__ import annotations

import json
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from opacus.accountants import RDPAccountant

from privlm.accounting import (
    Budget,
    Charge,
    PrivacyLedger,
    RdpCurve,
    dpsgd_epsilon,
    poisson_subsampled_rdp,
)
from privlm.accounting.relations import Relation

RESULTS = Path(__file__).parent / "results"


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def eq12_scalar(eps_of_k, q, orders):
    """Baseline: Eq. 12 term by term with math.* (log-sum-exp by hand to avoid overflow)."""
    out = []
    for a in orders:
        logs = [(a - 1) * math.log1p(-q) + math.log1p((a - 1) * q)]
        for k in range(2, a + 1):
            lb = math.lgamma(a + 1) - math.lgamma(k + 1) - math.lgamma(a - k + 1)
            logs.append(lb + (a - k) * math.log1p(-q) + k * math.log(q) + (k - 1) * eps_of_k(k))
        m = max(logs)
        out.append((m + math.log(sum(math.exp(x - m) for x in logs))) / (a - 1))
    return out


def bench_amplification():
    orders = list(range(2, 257))
    curve = np.array([0.05 * k for k in range(2, 257)])
    vec = best_of(lambda: poisson_subsampled_rdp(curve, 0.03, orders))
    base = best_of(lambda: eq12_scalar(lambda k: 0.05 * k, 0.03, orders), repeat=2)
    np.testing.assert_allclose(
        poisson_subsampled_rdp(curve, 0.03, orders),
        eq12_scalar(lambda k: 0.05 * k, 0.03, orders),
        rtol=1e-9,
    )
    return {
        "orders": len(orders),
        "vectorised_s": vec,
        "scalar_loop_s": base,
        "speedup": base / vec,
    }


def bench_dpsgd_epsilon():
    def opacus():
        acc = RDPAccountant()
        acc.history = [(1.5, 0.04, 2250)]
        return acc.get_privacy_spent(delta=1e-5)

    base = best_of(opacus)
    rdp = best_of(lambda: dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, "rdp"))
    prv = best_of(lambda: dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, "prv"), repeat=3)
    return {
        "opacus_rdp_s": base,
        "privlm_rdp_s": rdp,
        "privlm_prv_s": prv,
        "rdp_time_ratio_vs_opacus": rdp / base,
        "prv_time_ratio_vs_opacus": prv / base,
        "epsilon_rdp": dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, "rdp").epsilon,
        "epsilon_prv": dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, "prv").epsilon,
        "epsilon_opacus_rdp": opacus()[0],
    }


def bench_ledger(n=300):
    curve = RdpCurve.from_mapping({3.0: 1e-4})
    with tempfile.TemporaryDirectory() as tmp:
        ledger = PrivacyLedger(Path(tmp) / "l.db", "bench", Budget(1e6, 1e-5))
        t = time.perf_counter()
        for _ in range(n):
            ledger.charge(Charge("token", rdp=curve, relation=Relation.RECORD))
        durable = (time.perf_counter() - t) / n
        ledger.close()
    total = np.zeros(1)
    t = time.perf_counter()
    for _ in range(n):
        total = total + curve.at([3.0])
    memory = (time.perf_counter() - t) / n
    return {
        "charges": n,
        "durable_charge_ms": durable * 1e3,
        "in_memory_sum_ms": memory * 1e3,
        "durable_over_memory": durable / memory,
        "durable_charges_per_s": 1 / durable,
    }


def main():
    results = {
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
        },
        "amplification_eq12": bench_amplification(),
        "dpsgd_epsilon": bench_dpsgd_epsilon(),
        "ledger": bench_ledger(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "accounting.json").write_text(json.dumps(results, indent=2))
    a, d, lg = results["amplification_eq12"], results["dpsgd_epsilon"], results["ledger"]
    print(
        f"Eq. 12 over {a['orders']} orders: vectorised {a['vectorised_s'] * 1e3:.2f} ms, "
        f"scalar loop {a['scalar_loop_s'] * 1e3:.1f} ms → {a['speedup']:.0f}× faster"
    )
    print(
        f"DP-SGD ε (σ=1.5, q=0.04, 2250 steps): privlm RDP {d['privlm_rdp_s'] * 1e3:.1f} ms "
        f"({d['rdp_time_ratio_vs_opacus']:.2f}× Opacus RDP), PRV {d['privlm_prv_s'] * 1e3:.0f} ms "
        f"({d['prv_time_ratio_vs_opacus']:.1f}× Opacus RDP); ε {d['epsilon_rdp']:.4f} (RDP) vs "
        f"{d['epsilon_prv']:.4f} (PRV)"
    )
    print(
        f"Ledger: {lg['durable_charge_ms']:.2f} ms per durable charge "
        f"({lg['durable_charges_per_s']:.0f}/s), {lg['durable_over_memory']:.0f}× an in-memory sum"
    )
    print(f"wrote {RESULTS / 'accounting.json'}")


if __name__ == "__main__":
    main()
