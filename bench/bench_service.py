"""Generation under concurrent clients (SmolLM2-135M).

One run, so each figure has its baseline beside it. A live ``privlm serve`` answers PMixED
completions from 1, 8 and 32 concurrent clients, twice:
- serialised: ``--max-batch 1``, one completion decoded at a time (the service's path before its batching scheduler);
- batched: the default scheduler, concurrent completions decoded together, one forward pass
  per step for all of them.
Throughout, another client polls ``/v1/health``; its latency is recorded. The library floor,
``PMixED.generate`` in-process charging a SQLite ledger per token, is measured too.

A long prompt, twice: one client streams a completion while another sends a prompt of
``--long-tokens`` tokens, prefilled whole (``--prefill-chunk 65536``, the path before chunking)
or in chunks between decoding steps (the default). The streaming client's longest wait between
two pieces is recorded.

The ensemble is trained by the service itself (an ``ensemble`` job on WikiText-2 records).

Usage (from the repository root, which holds tests/service/live.py):
    PYTHONPATH=. python bench/bench_service.py [--parts 4] [--tokens 16] [--per-client 2]
        [--long-tokens 6000] [--only throughput|long-prompt]
Writes bench/results/service.json (``--only`` updates its own part of it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.service.live import LiveServer, deploy_ensemble

from privlm.data import corpora
from privlm.predict import PMixEDConfig, build_predictor
from privlm.predict.loading import load_ensemble

RESULTS = Path(__file__).parent / "results"
PROMPT = "The history of the city begins in the early medieval period, when"
QUERIES = 1_000_000
MODES = {"serialised": ("--max-batch", "1"), "batched": ()}
PREFILL_MODES = {"whole": ("--prefill-chunk", "65536"), "chunked": ()}


def train(
    srv: LiveServer, key: str, args: argparse.Namespace, out: dict[str, Any]
) -> tuple[str, str]:
    """The ensemble job and a PMixED deployment of it: (deployment id, job id)."""
    text = "\n".join(r.text for r in corpora.wikitext2("train").records[: args.records])
    with srv.client(key, timeout=3600) as c:
        dep, job, out["ensemble_job_seconds"] = deploy_ensemble(
            c, text, {"parts": args.parts, "block_size": 64, "max_blocks": 8},
            {"mechanism": "pmixed", "epsilon": 100, "queries": QUERIES},
        )  # fmt: skip
        return dep, job


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


@contextmanager
def serving(root: Path, key: str, dep: str, flags: tuple[str, ...]) -> Iterator[LiveServer]:
    """The service (no worker) started with ``flags``, the deployment loaded before timing."""
    srv = LiveServer(root / "svc", worker=False, model="smollm2-135m", extra=flags).start()
    try:
        with srv.client(key) as c:
            c.post("/v1/completions", json={"model": dep, "prompt": "x", "max_tokens": 1})
        yield srv
    finally:
        srv.stop()


def long_prompt(srv: LiveServer, key: str, dep: str, args: argparse.Namespace) -> dict:
    """One client streams 64 tokens; after its 4th piece another client sends a prompt of
    ``long_tokens`` tokens for one token. The stream's gaps while that prompt is in."""
    import httpx

    stamps: list[float] = []
    long_span: list[float] = []
    prompt_tokens: list[int] = []

    def send_long() -> None:
        with srv.client(key, timeout=3600) as c:
            t = time.perf_counter()
            prompt = " ".join(["a"] * args.long_tokens)  # " a" is one token
            r = c.post("/v1/completions", json={"model": dep, "prompt": prompt, "max_tokens": 1})
            assert r.status_code == 200, r.text
            long_span.extend([t, time.perf_counter()])
            prompt_tokens.append(r.json()["usage"]["prompt_tokens"])

    body = {"model": dep, "prompt": PROMPT, "max_tokens": 64, "stream": True}
    sender = threading.Thread(target=send_long)
    with httpx.stream(
        "POST", f"{srv.url}/v1/completions", json=body, timeout=3600,
        headers={"Authorization": f"Bearer {key}"},
    ) as r:  # fmt: skip
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                stamps.append(time.perf_counter())
                if len(stamps) == 4:
                    sender.start()
    sender.join()
    start, end = long_span
    during = [b - a for a, b in pairwise(stamps) if b > start and a < end]
    return {"prompt_tokens": prompt_tokens[0], "long_request_s": end - start, "stream_pieces_during": len(during),
            "stream_longest_gap_s": max(during, default=end - start),
            "stream_gaps_during_s": [round(g, 3) for g in during]}  # fmt: skip


def run_long_prompt(root: Path, key: str, dep: str, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {"long_tokens": args.long_tokens}
    for mode, flags in PREFILL_MODES.items():
        with serving(root, key, dep, flags) as srv:
            out[mode] = run = long_prompt(srv, key, dep, args)
            print(f"{mode:>8} prefill of {args.long_tokens} tokens: {run['long_request_s']:.1f} s;"
                  f" the stream's longest gap {run['stream_longest_gap_s']:.1f} s, "
                  f"{run['stream_pieces_during']} pieces meanwhile")  # fmt: skip
    out["longest_gap_whole_vs_chunked"] = (
        out["whole"]["stream_longest_gap_s"] / out["chunked"]["stream_longest_gap_s"]
    )
    print(f"the stream's longest gap: whole prefill {out['longest_gap_whole_vs_chunked']:.1f}× "
          "the chunked one")  # fmt: skip
    return out


def library_ms_per_token(output_dir: Path, root: Path, args: argparse.Namespace) -> float:
    pm = build_predictor(
        PMixEDConfig(epsilon=100, delta=1e-5, alpha=3, queries=QUERIES, sample_rate=0.03), load_ensemble(output_dir),
        ledger=root / "baseline-ledger.db", name="bench",
    )  # fmt: skip
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
    ap.add_argument("--long-tokens", type=int, default=6000)
    ap.add_argument("--only", choices=["throughput", "long-prompt"])
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="privlm-bench-service-"))
    path = RESULTS / "service.json"
    out: dict[str, Any] = json.loads(path.read_text()) if args.only and path.exists() else {}
    out["model"] = "smollm2-135m"
    trained: dict[str, Any] = {}
    srv = LiveServer(root / "svc", model="smollm2-135m").start()
    try:
        key = srv.tenant("bench")
        dep, job = train(srv, key, args, trained)
        print(f"ensemble job ({args.parts} adapters): {trained['ensemble_job_seconds']:.0f} s")
    finally:
        srv.stop()
    if args.only != "long-prompt":
        out.update({"args": vars(args), "runs": {}, **trained})
        throughput(root, key, dep, job, args, out)
    if args.only != "throughput":
        out["long_prompt"] = run_long_prompt(root, key, dep, args)
        out["long_prompt"]["command_args"] = vars(args)
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


def throughput(
    root: Path, key: str, dep: str, job: str, args: argparse.Namespace, out: dict[str, Any]
) -> None:
    for mode, flags in MODES.items():
        with serving(root, key, dep, flags) as srv:
            for n in args.clients:
                run = load(srv, key, dep, n, args)
                out["runs"].setdefault(str(n), {})[mode] = run
                print(f"{mode:>10}, {n:>2} clients: {run['tokens_per_s']:6.1f} tokens/s; "
                      f"health p99 {run['health']['p99_ms']:.0f} ms")  # fmt: skip
    for n, runs in out["runs"].items():
        runs["batched_vs_serialised"] = (
            runs["batched"]["tokens_per_s"] / runs["serialised"]["tokens_per_s"]
        )
        print(f"{n:>2} clients: batched {runs['batched_vs_serialised']:.2f}× the serialised path")
    output_dir = next((root / "svc" / "tenants").rglob(f"{job}/output"))
    out["library_ms_per_token"] = library_ms_per_token(output_dir, root, args)
    print(f"library floor (one request, in-process): {out['library_ms_per_token']:.1f} ms/token")


if __name__ == "__main__":
    main()
