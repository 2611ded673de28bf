"""Language modelling on DP synthetic text: a LoRA fine-tuned on each generator's synthetic
texts against DP-SGD's LoRA on the real private records at the same ε, scored by
perplexity on real held-out text.

Reads what ``bench/bench_synth.py`` wrote (``results/synth-TASK.json``: every synthetic text
of every generator and ε) and rebuilds the same private records and held-out split from its
settings, so both sides see the same data:
- **synthetic** (privlm PMixED, privlm DClip, invink, and the non-private generation): a
  LoRA fine-tuned without noise on the synthetic texts (post-processing: no further cost);
- **DP-SGD**: a LoRA fine-tuned on the real private records with DP-SGD at (ε, δ) per
  record (privlm's ``train_dpsgd``);
- references: the public model alone, and a non-private LoRA on the real records.

Every generator the source ran is trained on (privlm's PMixED, DClip and, where run, the
screen). Each side's learning rate is chosen on validation text (real test texts that
``bench_synth.py`` used for MAUVE, never the held-out ones); the held-out figure is then
read once. Perplexity is per token over the held-out texts packed in blocks.

Usage: python bench/bench_synth_lm.py [--task trec] [--seeds 0] [--lr-grid 5e-4,2e-3]
Writes bench/results/synth-lm-TASK.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # PEFT looks the base model up on the hub

from bench_synth import DELTA, MODEL, RESULTS, balanced, task

from privlm.data.records import Dataset
from privlm.models import load_public_model
from privlm.models.perplexity import perplexity
from privlm.training.config import DpSgdConfig, LoraTrainingConfig
from privlm.training.dpsgd import train_dpsgd
from privlm.training.lora_finetune import finetune_lora

BLOCK = 64  # tokens per block, training and scoring: the texts are a sentence each


def ppl_of(lm: Any, adapter: Path | None, texts: list[str]) -> float:
    """Perplexity of the public model, or of one adapter on it, on ``texts``."""
    net: Any = lm.model
    if adapter is not None:
        from peft import PeftModel

        net = PeftModel.from_pretrained(lm.model, adapter).eval()
    try:
        return float(perplexity(net, lm.tokenizer, texts, BLOCK, progress=False).perplexity)
    finally:
        if adapter is not None:
            net.unload()


def lora_on(
    texts: list[str], lr: float, args: Any, out: Path, seed: int, epochs: int | None = None
) -> Path:
    cfg = LoraTrainingConfig(epochs=epochs or args.epochs, learning_rate=lr, block_size=BLOCK,
                             batch_size=8, seed=seed, device="cpu", dtype="float32")  # fmt: skip
    finetune_lora(MODEL, texts, cfg, out, progress=False)
    return out


def dpsgd_on(private: list[Any], eps: float, lr: float, args: Any, out: Path, seed: int) -> Path:
    cfg = DpSgdConfig(target_epsilon=eps, delta=DELTA, epochs=args.dp_epochs,
                      batch_size=args.dp_batch, learning_rate=lr, block_size=BLOCK, seed=seed,
                      device="cpu", dtype="float32")  # fmt: skip
    train_dpsgd(MODEL, Dataset(private, "private"), out, cfg, progress=False)
    return out


def tuned(
    lm: Any, train: Any, grid: list[float], valid: list[str], held: list[str], tmp: Path
) -> dict[str, Any]:
    """Train at each learning rate of ``grid``, keep the one with the lowest validation
    perplexity, and read its held-out perplexity once."""
    best: tuple[float, float, Path] | None = None
    for lr in grid:
        adapter = train(lr, tmp / f"lr{lr:g}")
        v = ppl_of(lm, adapter, valid)
        if best is None or v < best[0]:
            best = (v, lr, adapter)
    assert best is not None
    return {"validation_ppl": best[0], "learning_rate": best[1],
            "heldout_ppl": ppl_of(lm, best[2], held)}  # fmt: skip


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}  # fmt: skip


def resumed(before: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The rows of an earlier run of the same settings (``--resume``), to be kept."""
    keys = ("source_settings", "validation_texts", "heldout_texts", "block")
    same = all(before.get(k) == report[k] for k in keys)
    grids = ("seeds", "lr_grid", "dp_lr_grid", "epochs", "real_epochs", "dp_epochs", "dp_batch")
    same = same and all(before["settings"].get(k) == report["settings"][k] for k in grids)
    if not same:
        raise SystemExit("--resume: the earlier run's settings differ; rerun without it")
    return dict(before["rows"])


SAME_DATA = ("task", "count", "batch", "max_tokens", "prompt_tokens", "real", "test", "seed")


def merged(paths: list[Path]) -> dict[str, Any]:
    """One source from several ``bench_synth.py`` outputs of the same task and seed (the same
    private records and split): their generators' texts side by side per ε."""
    first = json.loads(paths[0].read_text())
    for path in paths[1:]:
        more = json.loads(path.read_text())
        for key in SAME_DATA:
            if more["settings"].get(key) != first["settings"].get(key):
                raise SystemExit(f"{path}: {key} differs from {paths[0]}; not the same data")
        for eps, row in more["runs"].items():
            first["runs"].setdefault(eps, {}).update(
                {k: v for k, v in row.items() if isinstance(v, dict)}
            )
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="trec", help="sst2, trec or agnews")
    ap.add_argument("--source", type=lambda v: [Path(x) for x in v.split(",")], default=None,
                    help="default results/synth-TASK.json; several files (comma-separated) "
                    "of one task and seed are merged, e.g. privlm's and invink's runs")  # fmt: skip
    ap.add_argument("--seeds", default="0", help="training seeds (comma-separated)")
    ap.add_argument("--lr-grid", default="5e-4,2e-3", help="LoRA learning rates (synthetic)")
    ap.add_argument("--dp-lr-grid", default="2e-3,8e-3", help="DP-SGD learning rates")
    ap.add_argument("--epochs", type=int, default=10, help="LoRA epochs on synthetic text")
    ap.add_argument("--real-epochs", type=int, default=3, help="LoRA epochs on the real records")
    ap.add_argument("--dp-epochs", type=int, default=3)
    ap.add_argument("--eps", default=None, help="which of the source's ε (default: all)")
    ap.add_argument("--dp-batch", type=int, default=64, help="DP-SGD expected batch")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows --out already holds (same settings) and run the rest")  # fmt: skip
    args = ap.parse_args()
    source = merged(args.source or [RESULTS / f"synth-{args.task}.json"])
    out = args.out or RESULTS / f"synth-lm-{args.task}.json"
    s = source["settings"]
    t = task(args.task)
    private = balanced(t.train, t.labels, s["count"] * (s["batch"] - 1) // len(t.labels))
    assert len(private) == source["private_records"], "not the records bench_synth used"
    rng = np.random.default_rng(s["seed"])
    test = [t.test[i] for i in rng.permutation(len(t.test))]  # bench_synth's split
    valid = [r.text for r in test[: s["real"]]]  # MAUVE's reference texts
    held = [r.text for r in test[-s["test"] :]]  # the classifiers' test texts
    lm = load_public_model(MODEL, device="cpu", dtype="float32")
    grid = [float(x) for x in args.lr_grid.split(",")]
    dp_grid = [float(x) for x in args.dp_lr_grid.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    report: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "source_settings": s, "model": MODEL, "block": BLOCK, "delta": DELTA,
        "validation_texts": len(valid), "heldout_texts": len(held),
        "public_heldout_ppl": ppl_of(lm, None, held), "rows": {},
    }  # fmt: skip
    print(f"public model: held-out perplexity {report['public_heldout_ppl']:.2f}", flush=True)
    if args.resume and out.exists():
        report["rows"] = resumed(json.loads(out.read_text()), report)
    sets: dict[str, tuple[Any, list[float]]] = {}
    real = [r.text for r in private]
    sets["real records, non-private LoRA"] = (
        lambda lr, o, sd: lora_on(real, lr, args, o, sd, args.real_epochs), grid)  # fmt: skip
    sets["non-private synthetic"] = (
        lambda lr, o, sd: lora_on(source["non_private"]["all_texts"], lr, args, o, sd), grid)  # fmt: skip
    wanted = None if args.eps is None else {float(x) for x in args.eps.split(",")}
    for eps, row in source["runs"].items():
        e = float(eps)
        if wanted is not None and e not in wanted:
            continue
        sets[f"ε={eps} DP-SGD on the real records"] = (
            lambda lr, o, sd, e=e: dpsgd_on(private, e, lr, args, o, sd), dp_grid)  # fmt: skip
        for name in [k for k, v in row.items() if isinstance(v, dict) and "all_texts" in v]:
            texts = row[name]["all_texts"]
            sets[f"ε={eps} {name} synthetic"] = (
                lambda lr, o, sd, x=texts: lora_on(x, lr, args, o, sd), grid)  # fmt: skip
    for label, (train, lrs) in sets.items():
        if label in report["rows"]:
            print(f"{label}: kept from {out}", flush=True)
            continue
        runs = []
        start = time.perf_counter()
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(tuned(lm, lambda lr, o, sd=seed, f=train: f(lr, o, sd), lrs, valid, held,
                                  Path(tmp)))  # fmt: skip
        held_ppl = [r["heldout_ppl"] for r in runs]
        report["rows"][label] = {"runs": runs, "heldout_ppl": spread(held_ppl),
                                 "seconds": time.perf_counter() - start}  # fmt: skip
        gap = report["public_heldout_ppl"]
        print(f"{label}: held-out perplexity {statistics.fmean(held_ppl):.2f} "
              f"(public {gap:.2f}; log-ratio {math.log(statistics.fmean(held_ppl) / gap):+.3f})",
              flush=True)  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
