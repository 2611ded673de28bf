"""The tagger's int8 path against torchao's and against float32 (and bfloat16 where native),
on the held-out families: seconds per 1,000 texts for the tagger alone, rounds alternating
the bodies in one process, and whether the spans found are identical.

privlm's int8 layers (privlm.detect.int8) compute torchao's per-token dynamic int8 to the
bit; this measures what computing it once per shared input, with the weights' column sums
kept, the rescale cast first and in place, and the blocks' gated MLPs in place, saves. ISA caps (``ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2``) stand in for a CPU without
AVX512; the ranges are halved there, as on such a CPU.

Usage: OMP_NUM_THREADS=1 python bench/bench_int8.py [--n 1000] [--rounds 5] [--out int8_tagger.json]
→ bench/results/int8_tagger.json (needs torchao for its baseline: pip install torchao)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from privlm.detect.int8 import runs_without_vnni
from privlm.detect.pii_families import family_corpus
from privlm.detect.pii_families_heldout import HELDOUT_FAMILIES, HELDOUT_SOURCES
from privlm.detect.tagger import TaggerDetector, in_precision, native_bf16

RESULTS = Path(__file__).parent / "results"
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")
BASELINE = "torchao-int8"


def cpu() -> str:
    """The CPU's name and family (a "model name" alone says "AMD EPYC" for several)."""
    fields: dict[str, str] = {}
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.is_file() else []:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return f"{fields.get('model name', '?')}, family {fields.get('cpu family', '?')}"


def bodies(f32: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """float32, torchao's int8 (the same config privlm's computes), privlm's, bfloat16."""
    import torchao.quantization as ao

    reference = copy.deepcopy(f32)
    config = ao.Int8DynamicActivationInt8WeightConfig(reduce_range=runs_without_vnni())
    ao.quantize_(reference, config)
    out = {"float32": f32, BASELINE: reference, "privlm-int8": in_precision(f32, "int8")}
    if native_bf16():
        out["bfloat16"] = in_precision(f32, "bfloat16")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="held-out texts")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--out", default="int8_tagger.json")
    args = ap.parse_args()
    os.environ["PRIVLM_TAGGER_DTYPE"] = "float32"  # the body every variant is made from
    texts = [s.text for s in family_corpus(args.n, HELDOUT_FAMILIES, HELDOUT_SOURCES, 1)]
    detector = TaggerDetector()
    detector.detect(texts[:8])  # load the model before any timing
    featurizer = detector.tagger.featurizer
    variants = bodies(featurizer.body)
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    spans: dict[str, Any] = {}
    for _ in range(args.rounds):
        for name, body in variants.items():
            featurizer.body = body
            t = time.perf_counter()
            spans[name] = detector.detect(texts)
            seconds[name].append(time.perf_counter() - t)
    scale = 1000 / args.n
    base = statistics.median(seconds[BASELINE])
    rows = {
        name: {
            "seconds_per_1000": statistics.median(s) * scale,
            "rounds": [x * scale for x in s],
            "over_torchao_int8": statistics.median(s) / base,
            "spans_equal_to_torchao": spans[name] == spans[BASELINE],
        }
        for name, s in seconds.items()
    }
    print(f"{'body':<14}{'s / 1,000':>10}{'× torchao':>11}  same spans  rounds")
    for name, r in rows.items():
        print(f"{name:<14}{r['seconds_per_1000']:>10.2f}{r['over_torchao_int8']:>11.2f}  "
              f"{r['spans_equal_to_torchao']!s:<10}  "
              + ", ".join(f"{x:.2f}" for x in r["rounds"]))  # fmt: skip
    out = {
        "cpu": cpu(), "n": args.n, "threads": torch.get_num_threads(), "without_vnni": runs_without_vnni(),
        "isa_caps": {k: os.environ[k] for k in ISA_CAPS if k in os.environ},
        "baseline": BASELINE, "rows": rows, "command": " ".join(["python", *sys.argv]),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
