"""Private prediction against DP-SGD at the user level: WikiText-2 articles as users.

The privacy unit is a user: an article of WikiText-2 train, present in the private data by
its first ``--per-user`` paragraphs (headings left out). ``--users`` articles make the data.
On it, with SmolLM2-135M and LoRA rank 4:

- a non-private fine-tune on all of it (the top of the gap) and the public model (the bottom);
- PMixED, ε = 8, δ = 1e-5, α = 3, q = 1, per-unit bound: N adapters, each trained on the
  users a keyed hash assigns to its part, so one user changes one member
  (docs/sharp_edges.md, "PMixED per unit"); ``--runs`` deployments, each with its own budget
  and fresh sampling, scored on one shared forward pass per block;
- DP-SGD at the user level, ε = 8, δ = 1e-5: Poisson sampling of users, each user's blocks
  joined and clipped together (``DpSgdConfig.user_sampling = "joint"``);
- the plain average of the N members (no privacy): the ensemble's ceiling.

``--deployment K`` (K ≥ 1) is one more independent deployment: its own members (a fresh
keyed-hash partition, trained again) and its own user-level DP-SGD run (fresh sampling and
noise), cached under ``deployment-K/``; the public model and the fine-tuned reference are
shared. At q = 1 scoring has no randomness of its own, so the spread the benchmark reports is
over deployments: ``--summarise FILE...`` reads their JSON files and writes the mean ± sd of
each row's share of the gap (``user_level_deployments.json``).

``--members in-context``: the N members are the public model prompted with the first
``--prompt-tokens`` tokens of the users of their part (no training; docs/sharp_edges.md,
"In-context members"), and their ceiling is read off PMixED's own forward pass.
``--references FILE`` takes the fine-tuned and DP-SGD perplexities from an earlier run of
this benchmark on the same split and blocks instead of training them again; the public
model is scored again and must agree with the file's (the same tokens).
``--finetuned-from FILE`` takes only the fine-tuned reference from such a file (the top of
the gap, not private), so that a further deployment trains its members and DP-SGD alone.

The test text is one block of ``--block-size`` tokens from each of ``--blocks`` distinct
articles of WikiText-2 test; every token is one query charged to PMixED's budget.
Nothing is tuned on the test: settings are fixed in advance (listed in the JSON) or chosen
on WikiText-2 valid with ``--split valid --budget-queries 5080`` (the same radius as the test
deployment's T), one run per N, per λ cap (``--caps 1,0.5,0.3``) and per member training
(``--member-epochs 2``: its own members, cached as ``pmixed-N-e2``). DP-SGD's side of the
grid is ``bench/bench_dpsgd_grid.py``.

Usage: python bench/bench_user_level.py [--users 300] [--per-user 4] [--n 40] [--blocks 40]
       [--caps 1,0.5] [--split valid --budget-queries 5080 --blocks 8]
       [--members in-context --n 300 --references bench/results/user_level_valid_n80.json]
       [--deployment 2]   |   --summarise bench/results/user_level_n80.json ...
Writes bench/results/user_level.json (or --out). Models are cached under the privlm cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_utility import (
    DELTA,
    EPSILON,
    MODEL,
    SharedForward,
    parse_alphas,
    parse_caps,
    q_sweep,
)

from privlm.data import corpora
from privlm.data.records import Dataset, Record
from privlm.predict.config import PlainConfig
from privlm.predict.evaluate import evaluate
from privlm.predict.factory import build_predictor, plain_config
from privlm.predict.loading import load_adapter, load_ensemble
from privlm.settings import cache_dir
from privlm.training.config import EnsembleConfig
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.ensemble import ensemble_statistics, train_ensemble
from privlm.training.lora_finetune import LoraTrainingConfig

RESULTS = Path(__file__).parent / "results"
ARTICLE = re.compile(r"^= [^=].* =$")  # a top-level heading starts an article
SECTION = re.compile(r"^= = .* = =$")


def articles(split: str) -> list[list[str]]:
    """WikiText-2 (raw) ``split`` as articles: each a list of its paragraphs (no headings)."""
    out: list[list[str]] = []
    for text in corpora.wikitext2(split).texts():  # non-blank lines, stripped
        if ARTICLE.match(text):
            out.append([])
        elif out and not SECTION.match(text):
            out[-1].append(text)
    return out


def user_dataset(users: int, per_user: int, unit: str = "user") -> Dataset:
    """The first ``users`` train articles with at least ``per_user`` paragraphs, each a user
    with its first ``per_user`` paragraphs as records; ``unit="record"``: the same records,
    each its own unit (the record-level rows on the same data)."""
    chosen = [a for a in articles("train") if len(a) >= per_user][:users]
    if len(chosen) < users:
        raise SystemExit(f"only {len(chosen)} articles have {per_user} paragraphs")
    records = [
        Record(text, f"article-{i}") for i, art in enumerate(chosen) for text in art[:per_user]
    ]
    if unit == "record":
        records = [Record(r.text, f"record-{j}") for j, r in enumerate(records)]
    return Dataset(records, f"wikitext2 train, {users} articles × {per_user} paragraphs", unit)


def test_blocks(tokenizer: Any, n: int, size: int, split: str = "test") -> list[list[int]]:
    """One block of ``size`` tokens from each of the first ``n`` articles of ``split`` (test,
    or valid for choosing settings) long enough."""
    blocks = []
    for art in articles(split):
        ids = tokenizer("\n".join(art) + "\n", add_special_tokens=False)["input_ids"]
        if len(ids) >= size:
            blocks.append(ids[:size])
        if len(blocks) == n:
            return blocks
    raise SystemExit(f"only {len(blocks)} {split} articles have {size} tokens")


def lora_members_name(args: argparse.Namespace) -> str:
    """The LoRA ensemble's cache directory: ``pmixed-N`` (one epoch, the first runs' name) or
    ``pmixed-N-eK`` for ``--member-epochs K``."""
    suffix = "" if args.member_epochs == 1 else f"-e{args.member_epochs}"
    return f"pmixed-{args.n}{suffix}"


def train_all(args: argparse.Namespace, data: Dataset, base: Path, root: Path) -> dict[str, Any]:
    """The fine-tuned reference (under ``base``, on the records keyed by user: the same model
    for either unit), the N-member ensemble and DP-SGD at the data's unit (under ``root``);
    each cached."""
    lora = LoraTrainingConfig(epochs=1, block_size=128, batch_size=4, learning_rate=2e-3)
    member_lora = dataclasses.replace(lora, epochs=args.member_epochs)
    times: dict[str, Any] = {}
    by_user = user_dataset(args.users, args.per_user, "user")
    families = [(lora_members_name(args), args.n, data, root, member_lora)]
    if not (args.references or args.finetuned_from):
        families.insert(0, ("finetuned", 1, by_user, base, lora))
    for name, parts, records, where, training in families:
        t = time.perf_counter()
        cfg = EnsembleConfig(parts=parts, training=training)
        train_ensemble(MODEL, records, where / name, cfg)
        stats = ensemble_statistics(where / name)["adapters"]
        times[name] = {
            "train_seconds": sum(a["seconds"] for a in stats.values()),
            "this_run_seconds": time.perf_counter() - t,
        }
    if args.references:
        return times
    times[f"dpsgd-{data.unit_kind}"] = train_dpsgd_cached(
        data, root / f"dpsgd-{data.unit_kind}", args.dpsgd_batch, args.dpsgd_epochs, args.dpsgd_lr
    )
    return times


def train_dpsgd_cached(
    data: Dataset, where: Path, batch: int, epochs: int, lr: float
) -> dict[str, Any]:
    """DP-SGD at the data's unit, ε = 8, δ = 1e-5, at one setting (cached in ``where``):
    its training seconds and its privacy statement."""
    if not (where / "privacy.json").is_file():
        t = time.perf_counter()
        cfg = DpSgdConfig(
            target_epsilon=EPSILON, delta=DELTA, epochs=epochs, batch_size=batch,
            physical_batch_size=8, block_size=128, learning_rate=lr,
        )  # fmt: skip
        train_dpsgd(MODEL, data, where, cfg)
        (where / "seconds.json").write_text(json.dumps(time.perf_counter() - t))
    return {
        "train_seconds": json.loads((where / "seconds.json").read_text()),
        "privacy": json.loads((where / "privacy.json").read_text()),
    }


def in_context_ensemble(args: argparse.Namespace, data: Dataset, root: Path) -> tuple[Path, float]:
    """N in-context members, parts keyed by the data's unit (a fixed key: the same parts every
    run; a further ``--deployment`` draws its own), built by privlm; the directory and the
    seconds the build took."""
    where = root / f"in-context-{args.n}-{args.prompt_tokens}"
    cfg = EnsembleConfig(parts=args.n, members="in-context", prompt_tokens=args.prompt_tokens)
    t = time.perf_counter()
    key = None if args.deployment else "00" * 32  # None: a fresh key, kept in the cache
    train_ensemble(MODEL, data, where, cfg, progress=False, partition_key=key)
    return where, time.perf_counter() - t


class CeilingForward(SharedForward):
    """PMixED's shared forward pass, which also scores the members' plain average (no
    privacy: the ensemble's ceiling) on the block it was asked for, one position at a time
    (a float64 log-softmax of every member at once would not fit here)."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.nll, self.tokens = 0.0, 0

    def logits(self, ids: torch.Tensor, rows: torch.Tensor) -> Any:
        fresh = (ids.numpy().tobytes(), rows.numpy().tobytes()) != self._key
        out = super().logits(ids, rows)
        if fresh:
            members = (rows >= 0).nonzero().squeeze(1)
            for t in range(ids.shape[1] - 1):
                lp = torch.log_softmax(out[0][members, t].double(), dim=-1)[:, int(ids[0, t + 1])]
                self.nll -= float(torch.logsumexp(lp, dim=0)) - math.log(len(members))
                self.tokens += 1
        return out

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll / self.tokens)


def references(
    path: str, split: str, blocks: int, public: float, names: tuple[str, ...]
) -> dict[str, float]:  # fmt: skip
    """The perplexities ``names`` of an earlier run on the same split and blocks, after
    checking that the public model's perplexity is the file's (the same tokens)."""
    ref = json.loads(Path(path).read_text())
    ref_split = ref.get("split", "test")  # the first runs' files predate "split"
    if ref_split != split or ref["test_blocks"] != blocks:
        raise SystemExit(
            f"{path} scored {ref['test_blocks']} {ref_split} blocks, not {blocks} {split}"
        )
    return agreeing_perplexities(path, ref["perplexity"], public, names)


def agreeing_perplexities(
    path: str | Path, perplexity: dict[str, float], public: float, names: tuple[str, ...]
) -> dict[str, float]:
    """``names`` of an earlier run's perplexities, once its public model's agrees with this
    run's (else the tokens or the model differ, and its gap would not apply)."""
    if abs(perplexity["public"] - public) > 1e-3 * public:
        raise SystemExit(
            f"{path}: public perplexity {perplexity['public']:.4f}, here {public:.4f}: "
            "not the same tokens or model"
        )
    return {k: float(perplexity[k]) for k in names}


def summarise(paths: list[str], out_name: str) -> None:
    """Each row's share of the public → fine-tuned gap over independent deployments (each
    scored against its own public and fine-tuned perplexities): mean, sd and the runs; and
    whether PMixED's lead over DP-SGD exceeds both standard deviations (the issue's test)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    keys = {
        (r.get("split", "test"), r["test_blocks"], r["unit"], r["n"], r.get("members", "lora"))
        for r in runs
    }  # the first runs' files predate "split" and "members": test text, LoRA members
    if len(keys) != 1:
        raise SystemExit(f"these runs differ in split, blocks, unit, N or members: {keys}")
    shares: dict[str, list[float]] = {"pmixed": [r["pmixed"]["gap_closed_mean"] for r in runs]}
    dpsgd = next(k for k in runs[0]["gap_closed"] if k.startswith("dpsgd-"))  # the data's unit
    for name in (dpsgd, "ensemble"):
        shares[name] = [r["gap_closed"][name] for r in runs]
    rows = {
        name: {
            "runs": v, "mean": statistics.fmean(v),
            "sd": statistics.stdev(v) if len(v) > 1 else None,
        }
        for name, v in shares.items()
    }  # fmt: skip
    lead = rows["pmixed"]["mean"] - rows[dpsgd]["mean"]
    spreads = [rows[k]["sd"] for k in ("pmixed", dpsgd)]
    out = {
        "deployments": len(runs), "files": paths, "n": runs[0]["n"], "unit": runs[0]["unit"],
        "test_tokens": runs[0]["test_tokens"], "gap_closed": rows,
        "pmixed_lead_over_dpsgd": lead,
        "lead_exceeds_both_sds": None if None in spreads else lead > max(spreads),
        "radius": sorted({r["pmixed"]["radius"] for r in runs}),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out_name).write_text(json.dumps(out, indent=2))
    for name, row in rows.items():
        sd = "n/a" if row["sd"] is None else f"{row['sd']:.1%}"
        print(f"{name:<12} gap closed {row['mean']:6.1%} ± {sd} over {len(runs)} deployments")
    print(f"PMixED − DP-SGD: {lead:+.1%}; wrote {RESULTS / out_name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--per-user", type=int, default=4, help="paragraphs of each article")
    ap.add_argument("--n", type=int, default=40, help="PMixED's N (parts keyed by user)")
    ap.add_argument("--runs", type=int, default=5, help="PMixED deployments, each its own")
    ap.add_argument("--blocks", type=int, default=40, help="test articles, one block each")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--dpsgd-batch", type=int, default=16, help="expected users per step")
    ap.add_argument("--dpsgd-epochs", type=int, default=1)
    ap.add_argument("--dpsgd-lr", type=float, default=2e-3)
    ap.add_argument(
        "--unit", default="user", choices=("user", "record"),
        help="the privacy unit: an article (parts keyed by article, user-level DP-SGD) or a "
        "paragraph of the same data",
    )  # fmt: skip
    ap.add_argument(
        "--caps", type=parse_caps, default=(1.0,),
        help="λ caps to score PMixED at, comma-separated (each its own budget)",
    )  # fmt: skip
    ap.add_argument(
        "--alphas", type=parse_alphas, default=(3,),
        help="Rényi orders α to score PMixED at, comma-separated (each its own budget; "
        "PMixED's grid, on --split valid)",
    )  # fmt: skip
    ap.add_argument(
        "--split", default="test", choices=("test", "valid"),
        help="the text scored: test, or WikiText-2 valid to choose N and the cap on",
    )  # fmt: skip
    ap.add_argument(
        "--budget-queries", type=int, default=None,
        help="T each PMixED budget is planned for (default: the tokens scored); on valid, "
        "the test run's T (5,080), so the radius is the test deployment's",
    )  # fmt: skip
    ap.add_argument(
        "--members", default="lora", choices=("lora", "in-context"),
        help="PMixED's members: LoRA adapters, or the public model prompted with its part",
    )  # fmt: skip
    ap.add_argument(
        "--member-epochs", type=int, default=1,
        help="epochs each LoRA member trains for (PMixED's tuning grid, on --split valid)",
    )  # fmt: skip
    ap.add_argument("--prompt-tokens", type=int, default=256, help="in-context prompt length")
    ap.add_argument(
        "--references", default="",
        help="an earlier run's JSON (same split and blocks) to read the fine-tuned and DP-SGD "
        "rows from instead of training them",
    )  # fmt: skip
    ap.add_argument(
        "--deployment", type=int, default=0,
        help="K ≥ 1: an independent deployment with its own members (a fresh partition) and "
        "its own DP-SGD run, cached under deployment-K/ (0: the first run's models)",
    )  # fmt: skip
    ap.add_argument(
        "--summarise", nargs="+", default=None, metavar="FILE",
        help="only summarise these deployments' JSON files: each row's share of the gap, "
        "mean ± sd over them (→ user_level_deployments.json, or --out)",
    )  # fmt: skip
    ap.add_argument(
        "--finetuned-from", default="",
        help="an earlier run's JSON (same split and blocks) to read only the fine-tuned "
        "reference from (not private): a further deployment then trains members and DP-SGD",
    )  # fmt: skip
    ap.add_argument("--out", default=None, help="default: user_level.json or record_level.json")
    args = ap.parse_args()
    if args.summarise:
        summarise(args.summarise, args.out or "user_level_deployments.json")
        return
    data = user_dataset(args.users, args.per_user, args.unit)
    base = cache_dir() / "bench" / f"user-level-{args.users}x{args.per_user}"
    root = base if args.unit == "user" else base / "record-level"
    if args.deployment:
        root = root / f"deployment-{args.deployment}"
    suffix = "" if args.split == "test" else f"_{args.split}_n{args.n}"
    suffix += f"_d{args.deployment}" if args.deployment else ""
    args.out = args.out or f"{args.unit}_level{suffix}.json"
    if args.members == "in-context":
        times: dict[str, Any] = {}
        if not args.references:
            times = train_all(args, data, base, root)  # the fine-tune and DP-SGD rows
        ens_dir, times[f"in-context-{args.n}"] = in_context_ensemble(args, data, root)
    else:
        times = train_all(args, data, base, root)
        ens_dir = root / lora_members_name(args)
    ens = load_ensemble(ens_dir)
    tok = ens.model.tokenizer
    blocks = test_blocks(tok, args.blocks, args.block_size, args.split)
    queries = sum(len(b) - 1 for b in blocks)
    ppl = {"public": evaluate(build_predictor(plain_config("public"), ens), blocks).perplexity}
    dpsgd_name = f"dpsgd-{data.unit_kind}"  # DP-SGD at the data's unit
    if args.references:
        ppl.update(references(
            args.references, args.split, len(blocks), ppl["public"], ("finetuned", dpsgd_name)
        ))  # fmt: skip
    else:
        if args.finetuned_from:
            ppl.update(references(
                args.finetuned_from, args.split, len(blocks), ppl["public"], ("finetuned",)
            ))  # fmt: skip
        else:
            finetuned = load_ensemble(base / "finetuned")
            ppl["finetuned"] = evaluate(
                build_predictor(plain_config("finetuned"), finetuned), blocks
            ).perplexity
        dp = load_adapter(root / dpsgd_name, MODEL)
        ppl[dpsgd_name] = evaluate(
            build_predictor(PlainConfig(members="adapter"), dp), blocks
        ).perplexity
    gap = ppl["public"] - ppl["finetuned"]
    print({k: round(v, 3) for k, v in ppl.items()}, flush=True)
    t = time.perf_counter()
    shared = CeilingForward(ens.engine)
    with tempfile.TemporaryDirectory() as tmp:
        rows = q_sweep(
            shared, tok, blocks, [1.0], args.runs, Path(tmp), args.caps,
            budget_queries=args.budget_queries or queries, alphas=args.alphas,
        )  # fmt: skip
    score_seconds = time.perf_counter() - t
    ppl["ensemble"] = shared.perplexity  # the members' plain average, off PMixED's passes
    for r in rows:
        r["gap_closed_runs"] = [(ppl["public"] - p) / gap for p in r["perplexities"]]
        r["gap_closed_mean"] = statistics.fmean(r["gap_closed_runs"])
        r["gap_closed_sd"] = statistics.stdev(r["gap_closed_runs"]) if args.runs > 1 else 0.0
    row = min(rows, key=lambda r: r["mean"])  # the best cap on this split
    out = {
        "model": MODEL,
        "unit": "user (a WikiText-2 article)" if args.unit == "user" else "record (a paragraph)",
        "users": args.users,
        "per_user": args.per_user, "records": len(data), "n": args.n, "q": 1.0,
        "members": args.members, "prompt_tokens": args.prompt_tokens,
        "references": args.references or None,
        "finetuned_from": args.finetuned_from or None,
        "test_blocks": len(blocks), "test_tokens": queries,
        "budget_queries": args.budget_queries or queries, "epsilon": EPSILON, "delta": DELTA,
        "perplexity": ppl,
        "gap_closed": {k: (ppl["public"] - v) / gap for k, v in ppl.items()},
        "split": args.split,
        "pmixed": {**row, "score_seconds": score_seconds},
        "pmixed_by_cap": rows,
        "fixed_settings": {
            "pmixed": {"alphas": list(args.alphas), "q": 1.0, "n": args.n, "caps": list(args.caps),
                       "member_epochs": args.member_epochs, "lr": 2e-3},
            "dpsgd": {"batch_units": args.dpsgd_batch, "epochs": args.dpsgd_epochs,
                      "lr": args.dpsgd_lr, "user_sampling": "joint", "clip": 1.0},
        },
        "training": times,
        "deployment": args.deployment,
        "command": " ".join(["python", *sys.argv]),
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=2))
    for k, v in ppl.items():
        print(f"{k:<12} perplexity {v:8.3f}   gap closed {out['gap_closed'][k]:6.1%}")
    for r in rows:
        print(
            f"PMixED N={args.n} q=1 α {r['alpha']} λ cap {r['lambda_cap']} per {args.unit} "
            f"({args.split}): "
            f"perplexity {r['mean']:.3f} ± {r['sd']:.3f} ({args.runs} runs), gap closed "
            f"{r['gap_closed_mean']:.1%} ± {r['gap_closed_sd']:.1%}, radius {r['radius']:.3f}, "
            f"median λ {r['median_lambda']:.4f}"
        )
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
