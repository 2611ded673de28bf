"""What the service adds to private generation (SmolLM2-135M, issue 6).

One run, so each figure has its baseline beside it:
- library: ``PMixED.generate`` in-process over the ensemble the service trained, charging a
  SQLite ledger per token (the floor: the mechanism and its durable charges);
- service, 1 client: ``POST /v1/completions`` on a live ``privlm serve`` (HTTP, key lookup,
  JSON, the deployment lock, the ledger in the service's ledger database);
- service, 8 concurrent clients: throughput while the lock serialises generation.

The ensemble is trained by the service itself (an ``ensemble`` job on WikiText-2 records), so
the job's wall time is reported too.

Usage (from the repository root, which holds tests/service/live.py):
    PYTHONPATH=. python bench/bench_service.py [--parts 4] [--tokens 16] [--requests 6]
Writes bench/results/service.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.service.live import LiveServer, wait_for_job

from privlm.accounting import Budget, PrivacyLedger
from privlm.data import corpora
from privlm.predict import PMixED, PMixEDConfig
from privlm.predict.loading import load_ensemble

RESULTS = Path(__file__).parent / "results"
PROMPT = "The history of the city begins in the early medieval period, when"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="privlm-bench-service-"))
    srv = LiveServer(root / "svc", model="smollm2-135m").start()
    out: dict = {"args": vars(args), "model": "smollm2-135m"}
    try:
        key = srv.tenant("bench")
        text = "\n".join(r.text for r in corpora.wikitext2("train").records[: args.records])
        with srv.client(key, timeout=3600) as c:
            ds = c.post("/v1/datasets", files={"file": ("wiki.txt", text.encode())}).json()["id"]
            t = time.perf_counter()
            job = c.post(
                "/v1/jobs",
                json={"kind": "ensemble", "dataset_id": ds,
                      "params": {"parts": args.parts, "block_size": 64, "max_blocks": 8}},
            ).json()["id"]  # fmt: skip
            done = wait_for_job(c, job, timeout=3600)
            assert done["status"] == "succeeded", done
            out["ensemble_job_seconds"] = time.perf_counter() - t
            print(f"ensemble job ({args.parts} adapters): {out['ensemble_job_seconds']:.0f} s")
            queries = 100_000
            dep = c.post(
                "/v1/deployments",
                json={"job_id": job, "mechanism": "pmixed", "epsilon": 8, "queries": queries},
            ).json()["id"]
            c.post("/v1/completions", json={"model": dep, "prompt": "x", "max_tokens": 1})  # load
            lat = []
            for _ in range(args.requests):
                t = time.perf_counter()
                r = c.post(
                    "/v1/completions",
                    json={"model": dep, "prompt": PROMPT, "max_tokens": args.tokens},
                ).json()
                lat.append((time.perf_counter() - t) / r["usage"]["completion_tokens"])
            out["service_ms_per_token"] = 1000 * statistics.median(lat)

            def one(_: int) -> int:
                with srv.client(key, timeout=3600) as cc:
                    r = cc.post(
                        "/v1/completions",
                        json={"model": dep, "prompt": PROMPT, "max_tokens": args.tokens},
                    ).json()
                    return int(r["usage"]["completion_tokens"])

            t = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                total = sum(pool.map(one, range(args.clients)))
            out["service_concurrent_tokens_per_s"] = total / (time.perf_counter() - t)
        output_dir = next((srv.data_dir / "tenants").rglob(f"{job}/output"))
        srv.stop()  # the library baseline runs alone
        lm, engine, _ = load_ensemble(output_dir)
        led = PrivacyLedger(root / "baseline-ledger.db", "bench", Budget(8, 1e-5))
        pm = PMixED(engine, lm.tokenizer, led, PMixEDConfig(8, 1e-5, 3, queries, 1.0))
        pm.generate("x", max_new_tokens=1)
        lat = []
        for _ in range(args.requests):
            t = time.perf_counter()
            g = pm.generate(PROMPT, max_new_tokens=args.tokens)
            lat.append((time.perf_counter() - t) / len(g.token_ids))
        out["library_ms_per_token"] = 1000 * statistics.median(lat)
        out["service_vs_library"] = out["service_ms_per_token"] / out["library_ms_per_token"]
        out["concurrent_vs_library_throughput"] = out["service_concurrent_tokens_per_s"] / (
            1000 / out["library_ms_per_token"]
        )
        print(
            f"library {out['library_ms_per_token']:.1f} ms/token; service "
            f"{out['service_ms_per_token']:.1f} ms/token ({out['service_vs_library']:.2f}×); "
            f"{args.clients} clients: {out['service_concurrent_tokens_per_s']:.1f} tokens/s "
            f"({out['concurrent_vs_library_throughput']:.2f}× the library's)"
        )
    finally:
        srv.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "service.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'service.json'}")


if __name__ == "__main__":
    main()
