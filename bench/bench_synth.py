"""DP synthetic text side by side: privlm synth, InvisibleInk (``invink`` 0.1.0) and
non-private generation, on SST-2 with SmolLM2-135M-Instruct, one run, same data, model,
ε, δ, count and length.

For each ε: the private generators (privlm synth with each of its per-token mechanisms,
PMixED and DClip, and InvisibleInk) get the same private records (``--count`` × ``--batch``
of SST-2 train, balanced), the same number of texts per label (InvisibleInk, which has no
labels, is run once per label on that label's records), ``--batch`` model rows per token
(privlm: ``--batch`` − 1 in-context members and the public model; InvisibleInk:
batch_size = ``--batch``) and the same ``--max-tokens``. Measured:
- fidelity: MAUVE (``mauve-text``) of the synthetic texts against held-out SST-2 test
  sentences, on features from the public model (mean-pooled last hidden state: no feature
  model can be downloaded);
- downstream: a logistic regression on the same features, trained on the synthetic texts,
  accuracy on SST-2 test; against the same classifier trained on the real private records
  without privacy;
- cost: wall time and tokens per second, as a ratio to non-private generation of the same
  number of texts (the public model prompted with the same records, one row per token).

invink 0.1.0 writes one line with Python 3.12's f-string syntax (a print); on Python 3.11
it is loaded with that line's quotes swapped, nothing else changed (``load_invink``).
invink is a benchmark dependency only (``make bench-synth`` installs it).

Usage: python bench/bench_synth.py [--count 60] [--batch 8] [--max-tokens 24] [--eps 8,3]
Writes bench/results/synth.json.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privlm.data import corpora
from privlm.data.records import Dataset, Record
from privlm.models import load_public_model
from privlm.synth import SynthConfig, synthesize

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
LABELS = ["negative", "positive"]
DESCRIPTION = "Write a one-sentence movie review."
DELTA = 1e-5


def sst2(split: str) -> list[Record]:
    return corpora.sst2(split).records


def balanced(records: list[Record], per_label: int) -> list[Record]:
    return [r for label in LABELS for r in [x for x in records if x.label == label][:per_label]]


def load_invink() -> Any:
    """invink's ``generate``; on Python < 3.12 its one 3.12-only f-string is re-quoted."""
    if sys.version_info >= (3, 12):
        return importlib.import_module("invink.generate").generate
    spec = importlib.util.find_spec("invink")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    package = types.ModuleType("invink")
    package.__path__ = [str(folder)]
    sys.modules["invink"] = package
    src = (
        (folder / "utils.py")
        .read_text()
        .replace(
            '{"all devices" if device_map == "auto" else device_map}',
            "{'all devices' if device_map == 'auto' else device_map}",
        )
    )
    utils = types.ModuleType("invink.utils")
    utils.__file__ = str(folder / "utils.py")
    exec(compile(src, utils.__file__, "exec"), utils.__dict__)
    sys.modules["invink.utils"] = utils
    return importlib.import_module("invink.generate").generate


@torch.no_grad()
def features(lm: Any, texts: list[str], batch: int = 16) -> np.ndarray:
    """Mean-pooled last hidden states of the public model (MAUVE's and the classifier's)."""
    tok = lm.tokenizer
    tok.padding_side = "right"
    out = []
    for i in range(0, len(texts), batch):
        enc = tok([t or "." for t in texts[i : i + batch]], return_tensors="pt", padding=True,
                  truncation=True, max_length=64)  # fmt: skip
        hidden = lm.model(**enc, output_hidden_states=True).hidden_states[-1]
        mask = enc["attention_mask"][..., None].float()
        out.append(((hidden * mask).sum(1) / mask.sum(1)).numpy())
    return np.concatenate(out)


def scores(lm: Any, texts: list[str], labels: list[str], real: dict[str, Any]) -> dict[str, Any]:
    import mauve
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = features(lm, texts)
    m = mauve.compute_mauve(p_features=real["mauve_x"], q_features=x, verbose=False,
                            num_buckets=max(2, min(len(texts), len(real["mauve_x"])) // 10))  # fmt: skip
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    y = np.array([LABELS.index(label) for label in labels])
    acc = None
    if len(set(y)) == 2:
        clf.fit(x, y)
        acc = float(clf.score(real["test_x"], real["test_y"]))
    return {"mauve": float(m.mauve), "accuracy": acc, "texts": len(texts),
            "mean_words": float(np.mean([len(t.split()) for t in texts]))}  # fmt: skip


def run_privlm(
    lm: Any, private: list[Record], eps: float, mechanism: str, args: Any, tmp: Path
) -> dict[str, Any]:
    cfg = SynthConfig(epsilon=eps, delta=DELTA, count=args.count, max_tokens=args.max_tokens,
                      members=args.batch - 1, prompt_tokens=args.prompt_tokens,
                      description=DESCRIPTION, seed=args.seed, mechanism=mechanism,
                      top_k=args.top_k)  # fmt: skip
    out = tmp / f"privlm-{mechanism}-{eps}.jsonl"
    t = time.perf_counter()
    res = synthesize(lm, Dataset(private, "sst2-train"), out, cfg, labels=LABELS, progress=True)
    wall = time.perf_counter() - t
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    tokens = sum(len(lm.tokenizer(r["text"])["input_ids"]) for r in rows)
    return {"texts": [r["text"] for r in rows], "labels": [r["label"] for r in rows],
            "seconds": wall, "tokens": tokens,
            **{k: res.statement[k] for k in ("radius", "alpha", "clip") if k in res.statement}}  # fmt: skip


def run_invink(model_dir: Path, private: list[Record], eps: float, args: Any) -> dict[str, Any]:
    generate = load_invink()
    texts, labels, tokens, wall = [], [], 0, 0.0
    for label in LABELS:
        mine = [r.text for r in private if r.label == label]
        t = time.perf_counter()
        out = generate(mine, model_name_or_path=str(model_dir),
                       dataset_desc=f"{DESCRIPTION} Sentiment: {label}.", epsilon=eps,
                       delta=DELTA, batch_size=args.batch, num=args.count // len(LABELS),
                       max_toks=args.max_tokens, topk=args.top_k, dtype="float32", device_map=-1,
                       allow_download=False, random_seed=args.seed)  # fmt: skip
        wall += time.perf_counter() - t
        texts += [t.split("\n")[0].strip() for t in out.texts]
        labels += [label] * len(out.texts)
        tokens += int(sum(out.lens))
    return {"texts": texts, "labels": labels, "seconds": wall, "tokens": tokens}


@torch.no_grad()
def run_plain(lm: Any, private: list[Record], args: Any) -> dict[str, Any]:
    """Non-private: each text from the public model prompted with its batch's records (the
    format privlm's members see), one row per token, sampled; the same count and length."""
    tok = lm.tokenizer
    texts, labels, tokens = [], [], 0
    per_label = args.count // len(LABELS)
    t = time.perf_counter()
    for label in LABELS:
        mine = [r.text for r in private if r.label == label]
        size = max(1, len(mine) // per_label)
        for i in range(per_label):
            examples = "".join(f"Text: {x}\n" for x in mine[i * size : (i + 1) * size])
            prompt = f"{examples}{DESCRIPTION}\nLabel: {label}\nText:"
            ids = tok(prompt, return_tensors="pt")["input_ids"][:, -512:]
            out = lm.model.generate(ids, do_sample=True, max_new_tokens=args.max_tokens,
                                    pad_token_id=tok.eos_token_id)  # fmt: skip
            new = out[0, ids.shape[1] :]
            tokens += int(new.shape[0])
            texts.append(tok.decode(new, skip_special_tokens=True).split("\n")[0].strip())
            labels.append(label)
    return {"texts": texts, "labels": labels, "seconds": time.perf_counter() - t, "tokens": tokens}


def save_plain(lm: Any, folder: Path) -> None:
    """The public model as a plain Hugging Face folder for invink (privlm loads it from a
    GGUF file, which transformers will not save as such): the same weights, float32."""
    import copy

    config = copy.deepcopy(lm.model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(lm.model)(config)
    plain.load_state_dict(lm.model.state_dict())
    plain.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=60, help="synthetic texts (split over labels)")
    ap.add_argument("--batch", type=int, default=8, help="model rows per token (members + 1)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=100, help="DClip's public top-k (both)")
    ap.add_argument("--eps", default="8,3")
    ap.add_argument("--real", type=int, default=200, help="SST-2 test sentences for MAUVE")
    ap.add_argument("--test", type=int, default=400, help="SST-2 test sentences scored")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "synth.json")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    lm = load_public_model(MODEL, device="cpu", dtype="float32")
    private = balanced(sst2("train"), args.count * (args.batch - 1) // len(LABELS))
    test = sst2("test")
    real = {
        "mauve_x": features(lm, [r.text for r in test[: args.real]]),
        "test_x": features(lm, [r.text for r in test[-args.test :]]),
        "test_y": np.array([LABELS.index(r.label) for r in test[-args.test :]]),
    }
    report: dict[str, Any] = {"settings": vars(args) | {"out": str(args.out)}, "model": MODEL,
                              "private_records": len(private), "delta": DELTA, "runs": {}}  # fmt: skip
    report["real_records"] = scores(lm, [r.text for r in private], [r.label for r in private], real)
    plain = run_plain(lm, private, args)
    report["non_private"] = {**scores(lm, plain["texts"], plain["labels"], real),
                             "seconds": plain["seconds"], "tokens": plain["tokens"]}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model_dir = tmp / "model"
        save_plain(lm, model_dir)
        for eps in [float(e) for e in args.eps.split(",")]:
            row: dict[str, Any] = {}
            for name in ("privlm-pmixed", "privlm-dclip", "invink"):
                got = (run_invink(model_dir, private, eps, args) if name == "invink" else
                       run_privlm(lm, private, eps, name.split("-")[1], args, tmp))  # fmt: skip
                row[name] = {**scores(lm, got["texts"], got["labels"], real),
                             "seconds": got["seconds"], "tokens": got["tokens"],
                             "cost_vs_non_private": got["seconds"] / plain["seconds"],
                             "examples": got["texts"][:3],
                             **{k: got[k] for k in ("radius", "alpha", "clip") if k in got}}  # fmt: skip
                r = row[name]
                print(f"ε={eps:g} {name}: MAUVE {r['mauve']:.3f} accuracy {r['accuracy']} "
                      f"{r['cost_vs_non_private']:.2f}× non-private's time", flush=True)  # fmt: skip
            report["runs"][str(eps)] = row
            for name in ("privlm-pmixed", "privlm-dclip"):
                print(
                    f"  {name}/invink time: {row[name]['seconds'] / row['invink']['seconds']:.2f}×"
                )
    print(
        f"non-private: MAUVE {report['non_private']['mauve']:.3f} acc "
        f"{report['non_private']['accuracy']}; real records: acc {report['real_records']['accuracy']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
