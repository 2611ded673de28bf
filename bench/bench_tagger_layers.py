"""Where `pii`'s time goes, and what a shallower tagger costs in recall.

`pii` is `pii-fast` (regex + privlm's recognisers + Presidio) plus the learned tagger, whose
features are SmolLM2-135M's hidden states after ``layer`` blocks (5 of 30 by default). For
each layer asked, a head is trained by the default recipe at that layer (development
families and value sources only; cached under the privlm cache, the shipped head for the
default layer) and measured on the held-out families and value sources, as
docs/results.md's detector table: full-span recall by type, over-redaction, and seconds per
1,000 texts of `pii`, of the tagger alone and of `pii-fast`, in the same run, with the ratio
`pii` / `pii-fast` the target reads (≤ 2).

The tagger reads the public model in ``--precision`` (default: the tagger's own choice,
bfloat16 where the CPU computes it natively, else int8 where it has VNNI, else float32;
heads are trained on float32 features either way). Capping the libraries
(``ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2``) halves
int8's ranges as on a CPU without VNNI, but does not reproduce such a CPU's speed: there
torch's int8 product takes a path about 40x slower than float32 (docs/results.md). ``--split dev`` measures on a fresh draw of the development families
and value sources (seed 101 by default; the recipe trains on seed 0): the text a layer is
chosen on. ``heldout`` (the default) only measures.

Usage: OMP_NUM_THREADS=1 python bench/bench_tagger_layers.py [--layers 12,6,4] [--n 1000]
       [--split dev|heldout] [--precision auto|float32|bfloat16|int8]
Writes bench/results/tagger_layers.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from privlm.detect import evaluate_pii, make_detector
from privlm.detect.base import UnionDetector
from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
from privlm.detect.pii_families_heldout import HELDOUT_FAMILIES, HELDOUT_SOURCES
from privlm.detect.pii_quality import PiiQuality
from privlm.detect.provenance import TAGGER_VERSION
from privlm.detect.tagger import (
    PRECISION_ENV,
    PRECISIONS,
    TaggerConfig,
    TaggerDetector,
    default_folder,
    feature_precision,
    train_default_tagger,
)
from privlm.settings import cache_dir

RESULTS = Path(__file__).parent / "results"
TYPES = ("PERSON", "STREET_ADDRESS", "GPE", "ORGANIZATION")
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def head_for(layer: int, sentences: int) -> tuple[Path, float | None]:
    """The head at ``layer``: the shipped one for the default layer, else trained by the
    default recipe at that layer (cached); with its training seconds when trained now."""
    if layer == TaggerConfig().layer:
        return default_folder(), None
    # the recipe's version in the name: a head of an older recipe is never reused
    folder = cache_dir() / "bench" / f"tagger-layer-{layer}-{sentences}-v{TAGGER_VERSION}"
    if (folder / "tagger.json").is_file():
        return folder, None
    t = time.perf_counter()
    train_default_tagger(folder, TaggerConfig(layer=layer), sentences)
    return folder, time.perf_counter() - t


def row(q: PiiQuality) -> dict[str, Any]:
    by_type = {t: q.recall_by_type[t].full for t in TYPES if t in q.recall_by_type}
    return {"full_recall": q.full_recall, "by_type": by_type,
            "over_redaction": q.over_redaction, "seconds_per_1000": q.seconds_per_1000}  # fmt: skip


def timed_ratio(fast: Any, pii: Any, texts: list[str], rounds: int) -> dict[str, Any]:
    """``pii``'s seconds over ``pii-fast``'s on ``texts``, timed in ``rounds`` that
    alternate the two (this machine's timing moves by a third between runs): each round's
    ratio, and their median."""
    ratios, seconds = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        fast.detect(texts)
        f = time.perf_counter() - t
        t = time.perf_counter()
        pii.detect(texts)
        p = time.perf_counter() - t
        ratios.append(p / f)
        seconds.append((f, p))
    per_1000 = 1000 / len(texts)
    return {"ratios": ratios, "median_ratio": statistics.median(ratios),
            "seconds_per_1000": [(f * per_1000, p * per_1000) for f, p in seconds]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="12,6,4", help="tagger layers, comma-separated")
    ap.add_argument("--n", type=int, default=1000, help="sentences measured")
    ap.add_argument("--split", choices=("heldout", "dev"), default="heldout")
    ap.add_argument("--seed", type=int, help="the draw (default 1 held out, 101 dev)")
    ap.add_argument("--precision", choices=("auto", *PRECISIONS), default="auto")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    ap.add_argument("--sentences", type=int, default=6000, help="training sentences per head")
    ap.add_argument("--out", default="tagger_layers.json")
    args = ap.parse_args()
    os.environ[PRECISION_ENV] = args.precision
    dev = args.split == "dev"
    args.seed = args.seed if args.seed is not None else (101 if dev else 1)
    families, sources = (DEV_FAMILIES, DEV_SOURCES) if dev else (HELDOUT_FAMILIES, HELDOUT_SOURCES)
    sample = family_corpus(args.n, families, sources, args.seed)
    fast = make_detector("pii-fast")
    fast.detect([sample[0].text])  # load spaCy and Presidio before any timing
    fast_row = row(evaluate_pii(fast, sample))
    out: dict[str, Any] = {
        "n": args.n, "split": args.split, "seed": args.seed,
        "precision": feature_precision(), "threads": torch.get_num_threads(),
        "isa_caps": {k: os.environ[k] for k in ISA_CAPS if k in os.environ},
        "pii_fast": fast_row, "layers": {}, "command": " ".join(["python", *sys.argv]),
    }  # fmt: skip
    print(f"pii-fast: {fast_row['seconds_per_1000']:.1f} s / 1,000 texts", flush=True)
    for layer in (int(x) for x in args.layers.split(",") if x):
        folder, train_s = head_for(layer, args.sentences)
        tagger = TaggerDetector(folder)
        tagger.detect([sample[0].text])  # load the model before timing
        alone = row(evaluate_pii(tagger, sample))
        union = UnionDetector([*fast.detectors, tagger], bridge=True)
        union.name = "pii"
        pii = row(evaluate_pii(union, sample))
        timing = timed_ratio(fast, union, [s.text for s in sample], args.rounds)
        pii["over_pii_fast"] = timing["median_ratio"]
        out["layers"][str(layer)] = {"pii": pii, "tagger": alone, "timing": timing,
                                     "train_seconds": train_s}  # fmt: skip
        print(
            f"layer {layer:>2}: pii {pii['seconds_per_1000']:.1f} s / 1,000; "
            f"{pii['over_pii_fast']:.2f}x pii-fast (median of "
            + ", ".join(f"{r:.2f}" for r in timing["ratios"])
            + f"), tagger alone "
            f"{alone['seconds_per_1000']:.1f} s; full recall "
            + ", ".join(f"{t} {v:.3f}" for t, v in pii["by_type"].items())
            + f"; over-redaction {pii['over_redaction']:.1%}",
            flush=True,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
