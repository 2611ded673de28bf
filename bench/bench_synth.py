"""DP synthetic text side by side: privlm synth, InvisibleInk (``invink`` 0.1.0) and
non-private generation, on SST-2 with SmolLM2-135M-Instruct, one run, same data, model,
ε, δ, count and length.

For each ε: the private generators (privlm synth with each of its per-token mechanisms,
PMixED, DClip and the sparse-vector screen (``--mechanisms``), and InvisibleInk) get the same private records (``--count`` × ``--batch``
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

Usage: python bench/bench_synth.py [--task sst2] [--count 60] [--batch 8] [--max-tokens 24] [--eps 8,3]
Writes bench/results/synth-TASK.json.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privlm.data import corpora
from privlm.data.records import Dataset, Record
from privlm.models import load_public_model
from privlm.synth import SynthConfig, synthesize

PARAMETERS = ("radius", "alpha", "clip", "paid_tokens", "threshold")
RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
DELTA = 1e-5


@dataclass(frozen=True)
class Task:
    """A labelled task of ../shared/data: its labels, private and test records, and the
    public description both generators get."""

    name: str
    labels: list[str]
    description: str
    train: list[Record]
    test: list[Record]


def task(name: str) -> Task:
    if name == "sst2":
        return Task(name, ["negative", "positive"], "Write a one-sentence movie review.",
                    corpora.sst2("train").records, corpora.sst2("test").records)  # fmt: skip
    if name == "trec":
        train, test = corpora.trec("train").records, corpora.trec("test").records
        labels = sorted({r.label for r in train if r.label})
        return Task(name, labels, "Write one question someone might ask.", train, test)
    if name == "agnews":  # only the test split is staged: its first half is the private data
        rows = corpora.agnews("test").records
        labels = ["World", "Sports", "Business", "Sci/Tech"]
        return Task(name, labels, "Write the title and first sentence of a news article.",
                    rows[: len(rows) // 2], rows[len(rows) // 2 :])  # fmt: skip
    raise SystemExit(f"unknown task {name!r}: sst2, trec or agnews")


def balanced(records: list[Record], labels: list[str], per_label: int) -> list[Record]:
    return [r for label in labels for r in [x for x in records if x.label == label][:per_label]]


@functools.lru_cache(maxsize=1)
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


def normalised(x: np.ndarray) -> np.ndarray:
    """Each feature vector to unit L2 norm: a per-example map, so DP-SGD's baseline needs no
    statistic of the private data."""
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
    return out


def scores(
    lm: Any, texts: list[str], labels: list[str], real: dict[str, Any], t: Task
) -> dict[str, Any]:
    import mauve
    from sklearn.linear_model import LogisticRegression

    x = features(lm, texts)
    m = mauve.compute_mauve(p_features=real["mauve_x"], q_features=x, verbose=False,
                            num_buckets=max(2, min(len(texts), len(real["mauve_x"])) // 10))  # fmt: skip
    clf = LogisticRegression(max_iter=2000)
    y = np.array([t.labels.index(label) for label in labels])
    acc = None
    if len(set(y)) == len(t.labels):
        clf.fit(normalised(x), y)
        acc = float(clf.score(normalised(real["test_x"]), real["test_y"]))
    return {"mauve": float(m.mauve), "accuracy": acc, "texts": len(texts),
            "mean_words": float(np.mean([len(x.split()) for x in texts]))}  # fmt: skip


def run_privlm(
    lm: Any, private: list[Record], eps: float, mechanism: str, args: Any, tmp: Path, t: Task
) -> dict[str, Any]:
    cfg = SynthConfig(epsilon=eps, delta=DELTA, count=args.count, max_tokens=args.max_tokens,
                      members=args.batch - 1, prompt_tokens=args.prompt_tokens,
                      description=t.description, seed=args.seed, mechanism=mechanism,
                      top_k=args.top_k, paid_tokens=args.paid_tokens,
                      threshold=args.threshold)  # fmt: skip
    out = tmp / f"privlm-{mechanism}-{eps}.jsonl"
    start = time.perf_counter()
    res = synthesize(lm, Dataset(private, t.name), out, cfg, labels=t.labels, progress=True)
    wall = time.perf_counter() - start
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    tokens = sum(len(lm.tokenizer(r["text"])["input_ids"]) for r in rows)
    return {"texts": [r["text"] for r in rows], "labels": [r["label"] for r in rows],
            "seconds": wall, "tokens": tokens,
            **{k: res.statement[k] for k in PARAMETERS if k in res.statement}}  # fmt: skip


def run_invink(
    model_dir: Path, private: list[Record], eps: float, args: Any, t: Task
) -> dict[str, Any]:
    generate = load_invink()
    texts, labels, tokens, wall = [], [], 0, 0.0
    for label in t.labels:
        mine = [r.text for r in private if r.label == label]
        start = time.perf_counter()
        out = generate(mine, model_name_or_path=str(model_dir),
                       dataset_desc=f"{t.description} Label: {label}.", epsilon=eps,
                       delta=DELTA, batch_size=args.batch, num=args.count // len(t.labels),
                       max_toks=args.max_tokens, topk=args.top_k, dtype="float32", device_map=-1,
                       allow_download=False, random_seed=args.seed)  # fmt: skip
        wall += time.perf_counter() - start
        texts += [x.split("\n")[0].strip() for x in out.texts]
        labels += [label] * len(out.texts)
        tokens += int(sum(out.lens))
    return {"texts": texts, "labels": labels, "seconds": wall, "tokens": tokens}


@torch.no_grad()
def run_plain(lm: Any, private: list[Record], args: Any, t: Task) -> dict[str, Any]:
    """Non-private: each text from the public model prompted with its batch's records (the
    format privlm's members see), one row per token, sampled; the same count and length."""
    tok = lm.tokenizer
    texts, labels, tokens = [], [], 0
    per_label = args.count // len(t.labels)
    start = time.perf_counter()
    for label in t.labels:
        mine = [r.text for r in private if r.label == label]
        size = max(1, len(mine) // per_label)
        for i in range(per_label):
            examples = "".join(f"Text: {x}\n" for x in mine[i * size : (i + 1) * size])
            prompt = f"{examples}{t.description}\nLabel: {label}\nText:"
            ids = tok(prompt, return_tensors="pt")["input_ids"][:, -512:]
            out = lm.model.generate(ids, do_sample=True, max_new_tokens=args.max_tokens,
                                    pad_token_id=tok.eos_token_id)  # fmt: skip
            new = out[0, ids.shape[1] :]
            tokens += int(new.shape[0])
            texts.append(tok.decode(new, skip_special_tokens=True).split("\n")[0].strip())
            labels.append(label)
    return {"texts": texts, "labels": labels, "seconds": time.perf_counter() - start,
            "tokens": tokens}  # fmt: skip


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


def dpsgd_accuracy(
    x: np.ndarray, y: np.ndarray, real: dict[str, Any], eps: float, seed: int
) -> float:
    """The same linear classifier (softmax regression on the same normalised features)
    trained on the real private records with DP-SGD at (ε, δ) per record (Opacus, RDP,
    σ calibrated; 30 epochs, batch 32, clip 1)."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    xs, ys = torch.tensor(normalised(x), dtype=torch.float32), torch.tensor(y)
    model = torch.nn.Linear(xs.shape[1], int(real["classes"]))
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=32)
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=eps,
        target_delta=DELTA, epochs=30, max_grad_norm=1.0,
    )  # fmt: skip
    for _ in range(30):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        test = torch.tensor(normalised(real["test_x"]), dtype=torch.float32)
        pred = model(test).argmax(-1).numpy()
    return float((pred == real["test_y"]).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="sst2", help="sst2, trec or agnews")
    ap.add_argument("--count", type=int, default=60, help="synthetic texts (split over labels)")
    ap.add_argument("--batch", type=int, default=8, help="model rows per token (members + 1)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=100, help="DClip's public top-k (both)")
    ap.add_argument("--eps", default="8,3")
    ap.add_argument(
        "--mechanisms", default="pmixed,dclip,screened", help="privlm synth's, comma-separated"
    )
    ap.add_argument("--paid-tokens", type=int, default=None, help="screened: c per text")
    ap.add_argument("--threshold", type=float, default=0.2, help="screened: τ")
    ap.add_argument(
        "--no-invink", dest="invink", action="store_false", help="leave InvisibleInk out"
    )
    ap.add_argument("--real", type=int, default=200, help="test texts MAUVE compares with")
    ap.add_argument(
        "--test", type=int, default=400, help="test texts the classifiers are scored on"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default: results/synth-TASK.json")
    args = ap.parse_args()
    out = args.out or RESULTS / f"synth-{args.task}.json"
    torch.manual_seed(args.seed)
    t = task(args.task)
    lm = load_public_model(MODEL, device="cpu", dtype="float32")
    private = balanced(t.train, t.labels, args.count * (args.batch - 1) // len(t.labels))
    rng = np.random.default_rng(args.seed)
    test = [t.test[i] for i in rng.permutation(len(t.test))]  # mixed labels, seeded
    real = {
        "mauve_x": features(lm, [r.text for r in test[: args.real]]),
        "test_x": features(lm, [r.text for r in test[-args.test :]]),
        "test_y": np.array([t.labels.index(r.label) for r in test[-args.test :]]),
        "classes": len(t.labels),
    }
    report: dict[str, Any] = {"settings": vars(args) | {"out": str(out)}, "model": MODEL,
                              "task": t.name, "private_records": len(private), "delta": DELTA,
                              "runs": {}}  # fmt: skip
    report["real_records"] = scores(
        lm, [r.text for r in private], [r.label for r in private], real, t
    )
    private_x = features(lm, [r.text for r in private])
    private_y = np.array([t.labels.index(r.label) for r in private])
    plain = run_plain(lm, private, args, t)
    report["non_private"] = {**scores(lm, plain["texts"], plain["labels"], real, t),
                             "seconds": plain["seconds"], "tokens": plain["tokens"],
                             "all_texts": plain["texts"], "all_labels": plain["labels"]}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model_dir = tmp / "model"
        save_plain(lm, model_dir)
        for eps in [float(e) for e in args.eps.split(",")]:
            row: dict[str, Any] = {"dpsgd_classifier_accuracy": dpsgd_accuracy(
                private_x, private_y, real, eps, args.seed)}  # fmt: skip
            print(f"ε={eps:g} DP-SGD classifier on the real records: "
                  f"{row['dpsgd_classifier_accuracy']:.3f}", flush=True)  # fmt: skip
            generators = [f"privlm-{m}" for m in args.mechanisms.split(",") if m]
            for name in generators + (["invink"] if args.invink else []):
                got = (run_invink(model_dir, private, eps, args, t) if name == "invink" else
                       run_privlm(lm, private, eps, name.split("-")[1], args, tmp, t))  # fmt: skip
                row[name] = {**scores(lm, got["texts"], got["labels"], real, t),
                             "seconds": got["seconds"], "tokens": got["tokens"],
                             "cost_vs_non_private": got["seconds"] / plain["seconds"],
                             "examples": got["texts"][:3],
                             "all_texts": got["texts"], "all_labels": got["labels"],
                             **{k: got[k] for k in PARAMETERS if k in got}}  # fmt: skip
                r = row[name]
                print(f"ε={eps:g} {name}: MAUVE {r['mauve']:.3f} accuracy {r['accuracy']} "
                      f"{r['cost_vs_non_private']:.2f}× non-private's time", flush=True)  # fmt: skip
            report["runs"][str(eps)] = row
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2, default=str))  # each ε as it lands
            for name in generators if args.invink else []:
                print(
                    f"  {name}/invink time: {row[name]['seconds'] / row['invink']['seconds']:.2f}×"
                )
    print(
        f"non-private: MAUVE {report['non_private']['mauve']:.3f} acc "
        f"{report['non_private']['accuracy']}; real records: acc {report['real_records']['accuracy']}"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
