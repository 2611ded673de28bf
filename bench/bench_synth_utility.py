"""Downstream utility of DP synthetic text, as its users measure it: a TF-IDF + logistic
regression classifier (scikit-learn) trained on each set of texts and scored on the real
test split, and the share of the gap it closes between the no-reference texts and the real
records.

Rows, for one task, one number of private records and each ε (same records, model, labels,
description, count and length):
- ``dp-lora``: ``privlm synth --generator dp-lora`` (DP-SGD LoRA at ε, then sampled);
- ``no-reference``: dp-lora's baseline, the public model sampled from the same contexts
  with no adapter (``privlm synth --baseline --generator dp-lora``);
- ``real``: the private records themselves, no privacy (the ceiling);

gap closed = (acc(generator) − acc(no-reference)) / (acc(real) − acc(no-reference)).

Cost: each generator's seconds against a non-private LoRA fine-tune (the same steps with no
clipping or noise) plus the same sampling, on this CPU.

Usage: python bench/bench_synth_utility.py --task sst2 --records 500 --eps 8 --seeds 0
Writes bench/results/synth-utility-TASK-RECORDS.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_synth import balanced, task
from cpuinfo import cpu_name

from privlm.data.records import Dataset
from privlm.models import load_public_model
from privlm.synth import SynthConfig, synthesize, synthesize_baseline

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
DELTA = 1e-5


def accuracy(train_texts: list[str], train_labels: list[str], t: Any, test: list[Any]) -> float:
    """TF-IDF (word 1–2-grams) + logistic regression trained on the texts, scored on the
    real test records."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    if len(set(train_labels)) < len(t.labels):
        return float("nan")
    clf = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True),
        LogisticRegression(max_iter=2000, C=4.0),
    )
    clf.fit(train_texts, train_labels)
    return float(clf.score([r.text for r in test], [r.label for r in test]))


def rows_of(path: Path) -> tuple[list[str], list[str]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r["text"] for r in rows], [r["label"] for r in rows]


def run_one(lm: Any, ds: Dataset, cfg: SynthConfig, labels: list[str], out: Path) -> float:
    start = time.perf_counter()
    synthesize(lm, ds, out, cfg, labels=labels, progress=False)
    return time.perf_counter() - start


def non_private_cost(lm: Any, ds: Dataset, cfg: SynthConfig, labels: list[str]) -> float:
    """A non-private LoRA fine-tune of the same training texts, steps and batch (no
    clipping, no noise), plus sampling the same count: the fair cost baseline."""
    import torch

    from privlm.synth import dp_lora

    train = dp_lora.training_data(ds, labels, cfg)
    from privlm.training.lora_finetune import lora_model, record_sequences

    start = time.perf_counter()
    _, model, _ = lora_model(lm, cfg.lora_rank, 32.0, None, 0)
    ids, y = record_sequences(
        lm.tokenizer, train.texts(), dp_lora.block_size(lm.tokenizer, cfg, labels)
    )
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate
    )
    model.train()
    steps = cfg.train_epochs * max(1, -(-len(ids) // cfg.train_batch_size))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        pick = torch.randint(len(ids), (cfg.train_batch_size,), generator=g)
        opt.zero_grad()
        out = model(input_ids=ids[pick], attention_mask=(y[pick] != -100).long(), labels=y[pick])
        out.loss.backward()
        opt.step()
    sampler = dp_lora.AdapterSampler(model, lm.tokenizer, cfg)
    with tempfile.TemporaryDirectory() as tmp:
        dp_lora.sample_into(Path(tmp) / "x.jsonl", sampler, labels, cfg, 0, lambda n: None, False)
    return time.perf_counter() - start


def spread(values: list[float]) -> dict[str, float]:
    good = [v for v in values if v == v]
    return {
        "mean": statistics.fmean(good) if good else float("nan"),
        "sd": statistics.stdev(good) if len(good) > 1 else 0.0,
        "runs": values,  # type: ignore[dict-item]
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--records", type=int, default=500, help="private records (balanced)")
    ap.add_argument("--count", type=int, default=300, help="synthetic texts per run")
    ap.add_argument("--eps", default="8")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument(
        "--no-cost",
        dest="cost",
        action="store_false",
        help="skip the non-private LoRA fine-tune the cost ratio is taken against",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or RESULTS / f"synth-utility-{args.task}-{args.records}.json"
    t = task(args.task)
    lm = load_public_model(MODEL, device="cpu", dtype="float32")
    labels = t.labels
    seeds = [int(s) for s in args.seeds.split(",")]
    test = t.test[: args.test]
    report: dict[str, Any] = {
        "settings": vars(args) | {"out": str(out)}, "model": MODEL, "task": t.name,
        "cpu": cpu_name(), "python": platform.python_version(), "delta": DELTA, "runs": {},
    }  # fmt: skip
    private = balanced(t.train, labels, args.records // len(labels))
    ds = Dataset(private, t.name)
    report["real"] = accuracy([r.text for r in private], [r.label for r in private], t, test)
    print(f"real records ({len(private)}): accuracy {report['real']:.3f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base: list[float] = []
        for seed in seeds:
            cfg = SynthConfig(generator="dp-lora", count=args.count, max_tokens=args.max_tokens,
                              description=t.description, seed=seed)  # fmt: skip
            path = tmp / f"base-{seed}.jsonl"
            synthesize_baseline(lm, path, cfg, labels=labels, progress=False)
            base.append(accuracy(*rows_of(path), t, test))
        report["no_reference"] = spread(base)
        print(f"no-reference: {report['no_reference']['mean']:.3f}", flush=True)
        for eps in [float(e) for e in args.eps.split(",")]:
            row: dict[str, Any] = {}
            accs, secs, examples = [], [], []
            for seed in seeds:
                cfg = SynthConfig(
                    generator="dp-lora", epsilon=eps, delta=DELTA, count=args.count,
                    max_tokens=args.max_tokens, description=t.description, seed=seed,
                    train_epochs=args.epochs, train_batch_size=args.batch_size,
                    learning_rate=args.lr,
                )  # fmt: skip
                path = tmp / f"dplora-{eps}-{seed}.jsonl"
                secs.append(run_one(lm, ds, cfg, labels, path))
                texts, got = rows_of(path)
                accs.append(accuracy(texts, got, t, test))
                examples = texts[:3]
                print(f"ε={eps:g} seed {seed} dp-lora: accuracy {accs[-1]:.3f} "
                      f"({secs[-1]:.0f} s)", flush=True)  # fmt: skip
            row["dp-lora"] = {**spread(accs), "seconds": spread(secs), "examples": examples}
            if args.cost:
                plain = non_private_cost(lm, ds, cfg, labels)
                row["dp-lora"]["cost_vs_non_private_lora"] = statistics.fmean(secs) / plain
                row["non_private_lora_seconds"] = plain
            gap = report["real"] - report["no_reference"]["mean"]
            for name in [k for k in row if isinstance(row[k], dict) and "mean" in row[k]]:
                row[name]["gap_closed"] = (row[name]["mean"] - report["no_reference"]["mean"]) / gap
            report["runs"][str(eps)] = row
            cost = row["dp-lora"].get("cost_vs_non_private_lora")
            print(f"ε={eps:g}: dp-lora {row['dp-lora']['mean']:.3f} ± {row['dp-lora']['sd']:.3f},"
                  f" gap closed {row['dp-lora']['gap_closed']:.0%}"
                  + (f"; cost {cost:.2f}× a non-private LoRA fine-tune and sampling" if cost
                     else ""), flush=True)  # fmt: skip
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
