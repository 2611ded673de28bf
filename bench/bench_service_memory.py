"""Does a long-running PMixED deployment's memory grow? (SmolLM2-135M, a live ``privlm serve``)

The user-level benchmark's scoring process grew by about 100 MB per scored block until it was
killed, from glibc heap fragmentation (docs/results.md, "At the user level"). The service
serves PMixED from one long-lived process, so this measures the same question there: a live
server with an in-context ensemble (no training) of ``--parts`` members deployed under PMixED
(q = 1), answering ``--requests`` completions of ``--tokens`` tokens one after the other; the
server process's resident memory (``VmRSS``) is read after each completion.

Reported: the resident memory after the first completion (the baseline, once the model and
the members' prompt caches are in), its maximum, the last, and the growth per 1,000 released
tokens fitted (least squares) over the second half of the completions, where a steady leak or
fragmentation shows and the warm-up does not.

Usage (from the repository root, which holds tests/service/live.py):
    PYTHONPATH=. python bench/bench_service_memory.py [--parts 64] [--requests 60] [--tokens 32] [--out F]
Writes bench/results/service_memory.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tests.service.live import LiveServer, deploy_ensemble

from privlm.data import corpora

RESULTS = Path(__file__).parent / "results"
PROMPT = "The history of the city begins in the early medieval period, when"


def rss_mb(pid: int) -> float:
    """The process's resident memory now, in MB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def build(root: Path, args: argparse.Namespace) -> tuple[str, str]:
    """A tenant, its WikiText upload and an in-context ensemble deployed under PMixED."""
    srv = LiveServer(root / "svc", model="smollm2-135m").start()
    try:
        key = srv.tenant("bench")
        text = "\n".join(r.text for r in corpora.wikitext2("train").records[: args.records])
        params = {"parts": args.parts, "members": "in-context", "prompt_tokens": args.prompt}
        with srv.client(key, timeout=3600) as c:
            dep, _, _ = deploy_ensemble(
                c, text, params,
                {"mechanism": "pmixed", "epsilon": 1000,
                 "queries": args.requests * args.tokens + 64, "sample_rate": 1.0},
            )  # fmt: skip
            return key, dep
    finally:
        srv.stop()


def serve_and_sample(root: Path, key: str, dep: str, args: argparse.Namespace) -> dict[str, Any]:
    """The serving process alone (no worker): RSS after each of ``requests`` completions."""
    srv = LiveServer(root / "svc", worker=False, model="smollm2-135m").start()
    assert srv.proc is not None
    samples, released = [], []
    t = time.perf_counter()
    try:
        with srv.client(key, timeout=3600) as c:
            for i in range(args.requests):
                r = c.post(
                    "/v1/completions",
                    json={"model": dep, "prompt": PROMPT, "max_tokens": args.tokens},
                )
                assert r.status_code == 200, r.text
                released.append(int(r.json()["usage"]["completion_tokens"]))
                samples.append(rss_mb(srv.proc.pid))
                print(f"completion {i + 1}/{args.requests}: RSS {samples[-1]:.0f} MB", flush=True)
    finally:
        srv.stop()
    return {"rss_mb": samples, "tokens": released, "seconds": time.perf_counter() - t}


def growth_per_1000_tokens(rss: list[float], tokens: list[int]) -> float:
    """Least-squares slope of RSS against released tokens over the second half, per 1,000."""
    x = np.cumsum(tokens)[len(tokens) // 2 :]
    y = np.asarray(rss)[len(rss) // 2 :]
    return float(np.polyfit(x, y, 1)[0] * 1000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", type=int, default=64, help="in-context members")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per member")
    ap.add_argument("--records", type=int, default=400, help="WikiText-2 train records")
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per completion")
    ap.add_argument("--out", default="service_memory.json", help="under bench/results/")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="privlm-bench-service-memory-"))
    key, dep = build(root, args)
    run = serve_and_sample(root, key, dep, args)
    rss = run["rss_mb"]
    out = {
        "model": "smollm2-135m", "args": vars(args), **run,
        "baseline_mb": rss[0], "max_mb": max(rss), "last_mb": rss[-1],
        "growth_mb_per_1000_tokens": growth_per_1000_tokens(rss, run["tokens"]),
        "last_vs_baseline": rss[-1] / rss[0],
    }  # fmt: skip
    print(f"RSS {out['baseline_mb']:.0f} MB after the first completion, {out['last_mb']:.0f} MB "
          f"after {sum(run['tokens'])} tokens ({out['last_vs_baseline']:.2f}× the first); "
          f"second half: {out['growth_mb_per_1000_tokens']:+.1f} MB per 1,000 tokens")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / args.out
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
