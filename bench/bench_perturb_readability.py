"""How readable perturbed text stays: the share of words that come through unchanged at
each ε per word, for both mechanisms, on public text (privlm.perturb.readability).

Baseline, in the same run: the text unperturbed (every word unchanged, share 1.0); each
figure is printed as that ratio. Each point is the median of ``--seeds`` noise draws
(seeds 0, 1, …), their range beside it. Writes bench/results/perturb_readability.json and
the table privlm ships (src/privlm/perturb/readability.json), from which the page's and
``privlm perturb``'s default ε and their trade-off lines are read.

    .venv/bin/python bench/bench_perturb_readability.py --seeds 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path

from privlm.data.corpora import SHIPPED
from privlm.perturb import readability as r

RESULTS = Path(__file__).resolve().parent / "results"


PUBLIC_TEXT = "the first 200 non-empty lines of WikiText-2's validation head shipped with privlm"


def public_lines(n: int = 200) -> list[str]:
    """The public text the table is measured on: the WikiText-2 validation head shipped
    with privlm (CC BY-SA 3.0), its first ``n`` non-empty lines."""
    with gzip.open(SHIPPED / "wikitext2-valid-head.txt.gz", "rt", encoding="utf-8") as fh:
        lines = [line.strip() for line in fh.read().splitlines() if line.strip()]
    return lines[:n]


GRID = {
    "laplace": (10, 25, 50, 75, 100, 125, 150, 175, 200, 300),
    "gaussian": (10, 25, 50, 100, 150, 200, 300, 500),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    lines = public_lines()
    baseline = 1.0  # the text unperturbed: every word unchanged
    table: dict[str, dict[str, object]] = {}
    for mechanism, grid in GRID.items():
        rows = []
        for eps in grid:
            t = time.perf_counter()
            shares = [r.measure_share(mechanism, eps, lines, seed) for seed in range(args.seeds)]
            med = statistics.median(shares)
            rows.append({"epsilon": eps, "share": med, "min": min(shares), "max": max(shares),
                         "by_seed": shares})  # fmt: skip
            print(f"{mechanism:8} ε {eps:>4}: {med:.3f} of words unchanged "
                  f"({min(shares):.3f}–{max(shares):.3f}; {med / baseline:.3f}× unperturbed) "
                  f"[{time.perf_counter() - t:.1f} s]")  # fmt: skip
        table[mechanism] = {"points": [[row["epsilon"], round(row["share"], 3)] for row in rows],
                            "runs": rows}  # fmt: skip
    shipped = {
        "text": PUBLIC_TEXT,
        "seeds": args.seeds,
        "delta": r.DEFAULT_DELTA,
        "mechanisms": {
            m: {
                "points": t["points"],
                "by_seed": {str(row["epsilon"]): row["by_seed"] for row in t["runs"]},
            }
            for m, t in table.items()
        },
    }
    r.TABLE.write_text(json.dumps(shipped, indent=1) + "\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {**shipped, "baseline": "unperturbed text (share 1.0)",
           "mechanisms": table}  # fmt: skip
    (RESULTS / "perturb_readability.json").write_text(json.dumps(out, indent=2) + "\n")
    for m in GRID:
        print(f"default ε per word, {m}: {r.default_epsilon(m):g} "
              f"(the least with ≥ {r.READABLE_SHARE:.0%} of words unchanged)")  # fmt: skip


if __name__ == "__main__":
    main()
