"""Generation under concurrent clients (SmolLM2-135M, issues 6 and 16 §1).

One run, so each figure has its baseline beside it. A live ``privlm serve`` answers PMixED
completions from 1, 8 and 32 concurrent clients, twice:
- serialised: ``--max-batch 1``, one completion decoded at a time (the path before issue 16);
- batched: the default scheduler, concurrent completions decoded together, one forward pass
  per step for all of them.
Throughout, another client polls ``/v1/health``; its latency is recorded. The library floor,
``PMixED.generate`` in-process charging a SQLite ledger per token, is measured too.

The ensemble is trained by the service itself (an ``ensemble`` job on WikiText-2 records).

Usage (from the repository root, which holds tests/service/live.py):
    PYTHONPATH=. python bench/bench_service.py [--parts 4] [--tokens 16] [--per-client 2]
Writes bench/results/service.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.service.live import LiveServer, wait_for_job

from privlm.accounting import Budget, PrivacyLedger
from privlm.data import corpora
from privlm.predict import PMixED, PMixEDConfig
from privlm.predict.loading import load_ensemble

RESULTS = Path(__file__).parent / "results"
PROMPT = "The history of the city begins in the early medieval period, when"
QUERIES = 1_000_000
MODES = {"serialised": ("--max-batch", "1"), "batched": ()}


def train(
    srv: LiveServer, key: str, args: argparse.Namespace, out: dict[str, Any]
) -> tuple[str, str]:
    """The ensemble job and a PMixED deployment of it: (deployment id, job id)."""
    text = "\n".join(r.text for r in corpora.wikitext2("train").records[: args.records])
    with srv.client(key, timeout=3600) as c:
        ds = c.post(
            "/v1/datasets", files={"file": ("wiki.txt", text.encode())},
            data={"budget_epsilon": "1000"},
        ).json()["id"]  # fmt: skip
        t = time.perf_counter()
        job = c.post(
            "/v1/jobs",
            json={"kind": "ensemble", "dataset_id": ds,
                  "params": {"parts": args.parts, "block_size": 64, "max_blocks": 8}},
        ).json()["id"]  # fmt: skip
        done = wait_for_job(c, job, timeout=3600)
        assert done["status"] == "succeeded", done
        out["ensemble_job_seconds"] = time.perf_counter() - t
        r = c.post(
            "/v1/deployments",
            json={"job_id": job, "mechanism": "pmixed", "epsilon": 100, "queries": QUERIES},
        )
        assert r.status_code == 201, r.text
        return str(r.json()["id"]), str(job)


class HealthProbe:
    """Polls /v1/health every 50 ms while the clients run."""

    def __init__(self, srv: LiveServer) -> None:
        self.srv, self.seen = srv, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.srv.url, timeout=60) as c:
            while not self.stop.is_set():
                t = time.perf_counter()
                c.get("/v1/health").raise_for_status()
                self.seen.append(time.perf_counter() - t)
                time.sleep(0.05)

    def __enter__(self) -> HealthProbe:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict[str, float]:
        ms = sorted(1000 * s for s in self.seen)
        return {"p50_ms": statistics.median(ms), "p99_ms": ms[int(0.99 * (len(ms) - 1))],
                "max_ms": ms[-1], "probes": len(ms)}  # fmt: skip


def load(srv: LiveServer, key: str, dep: str, clients: int, args: argparse.Namespace) -> dict:
    """``clients`` concurrent clients, each sending ``per_client`` completions."""

    def one(_: int) -> int:
        tokens = 0
        with srv.client(key, timeout=3600) as c:
            for _ in range(args.per_client):
                r = c.post(
                    "/v1/completions",
                    json={"model": dep, "prompt": PROMPT, "max_tokens": args.tokens},
                )
                assert r.status_code == 200, r.text
                tokens += int(r.json()["usage"]["completion_tokens"])
        return tokens

    with HealthProbe(srv) as probe:
        t = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            tokens = sum(pool.map(one, range(clients)))
        seconds = time.perf_counter() - t
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "health": probe.summary()}  # fmt: skip


def library_ms_per_token(output_dir: Path, root: Path, args: argparse.Namespace) -> float:
    lm, engine, _ = load_ensemble(output_dir)
    led = PrivacyLedger(root / "baseline-ledger.db", "bench", Budget(100, 1e-5))
    pm = PMixED(engine, lm.tokenizer, led, PMixEDConfig(100, 1e-5, 3, QUERIES, 0.03))
    pm.generate("x", max_new_tokens=1)
    lat = []
    for _ in range(4):
        t = time.perf_counter()
        g = pm.generate(PROMPT, max_new_tokens=args.tokens)
        lat.append((time.perf_counter() - t) / len(g.token_ids))
    return 1000 * statistics.median(lat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--per-client", type=int, default=2)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="privlm-bench-service-"))
    out: dict[str, Any] = {"args": vars(args), "model": "smollm2-135m", "runs": {}}
    srv = LiveServer(root / "svc", model="smollm2-135m").start()
    try:
        key = srv.tenant("bench")
        dep, job = train(srv, key, args, out)
        print(f"ensemble job ({args.parts} adapters): {out['ensemble_job_seconds']:.0f} s")
    finally:
        srv.stop()
    for mode, flags in MODES.items():
        srv = LiveServer(root / "svc", worker=False, model="smollm2-135m", extra=flags).start()
        try:
            with srv.client(key) as c:  # load the deployment before timing
                c.post("/v1/completions", json={"model": dep, "prompt": "x", "max_tokens": 1})
            for n in args.clients:
                run = load(srv, key, dep, n, args)
                out["runs"].setdefault(str(n), {})[mode] = run
                print(f"{mode:>10}, {n:>2} clients: {run['tokens_per_s']:6.1f} tokens/s; "
                      f"health p99 {run['health']['p99_ms']:.0f} ms")  # fmt: skip
        finally:
            srv.stop()
    for n, runs in out["runs"].items():
        runs["batched_vs_serialised"] = (
            runs["batched"]["tokens_per_s"] / runs["serialised"]["tokens_per_s"]
        )
        print(f"{n:>2} clients: batched {runs['batched_vs_serialised']:.2f}× the serialised path")
    output_dir = next((root / "svc" / "tenants").rglob(f"{job}/output"))
    out["library_ms_per_token"] = library_ms_per_token(output_dir, root, args)
    print(f"library floor (one request, in-process): {out['library_ms_per_token']:.1f} ms/token")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "service.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'service.json'}")


if __name__ == "__main__":
    main()
