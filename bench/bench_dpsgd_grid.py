"""DP-SGD's tuning grid on validation text: the DP-SGD side of the user-level comparison.

The settings of ``bench/bench_user_level.py``'s DP-SGD row (16 expected units per step, one
epoch, learning rate 2e-3) were fixed in advance. This benchmark trains DP-SGD on the same
data (the first ``--users`` WikiText-2 train articles, ε = 8, δ = 1e-5 per ``--unit``) at each
setting of ``--settings`` and scores it on WikiText-2 *valid*, never on the test, so that the
test rows can use the best setting. DP-SGD's own sampling and noise move a score by about a
point of the gap between runs of one setting (sd 1.0 points over the five test deployments),
so a difference smaller than that is not a choice; ``--repeat K`` trains a further,
independent run of each setting (its noise and batches from fresh OS entropy), and a
setting's figure is the mean over its runs.

Every setting is trained from scratch (cached under the privlm cache, ``dpsgd-grid/``), with
the σ that meets ε at its batch and epochs. The public model is scored here; the fine-tuned
reference (the top of the gap, not private) is read from ``--finetuned-from``, an earlier
``bench_user_level.py --split valid`` run on the same blocks, after checking that the public
model's perplexity agrees with the file's (the same tokens).

``--test FILE`` then scores the setting that is best on valid (by its mean over runs), and
only that one, on the test blocks of FILE (a ``bench_user_level.py`` test run on the same
data and unit, whose public and fine-tuned perplexities give the test gap): every run of it,
then their mean ± sd, the test figure of tuned DP-SGD, read after the choice.

Usage: python bench/bench_dpsgd_grid.py --settings 16:1:5e-3[,64:3:5e-3...] [--unit user]
       [--repeat 1] [--blocks 8] [--finetuned-from bench/results/user_level_valid_n80.json]
       [--test bench/results/user_level_n80.json [--test-out NAME.json]]
Each setting is batch:epochs:learning-rate (``--settings ""``: none trained now, for
``--test`` alone). Results are merged into bench/results/dpsgd_grid_{unit}.json (for other
data than 300 users of 4 paragraphs, dpsgd_grid_{unit}_{users}x{per_user}.json): one row per
run of a setting; a rerun of a setting's run replaces it; the test scores under "test", or
in a file of their own with ``--test-out NAME`` (a second test set for the same grid).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_user_level import (
    RESULTS,
    references,
    test_blocks,
    train_dpsgd_cached,
    user_dataset,
)  # fmt: skip
from bench_utility import DELTA, EPSILON, MODEL

from privlm.models.loading import load_tokenizer
from privlm.predict.config import PlainConfig
from privlm.predict.evaluate import evaluate
from privlm.predict.factory import build_predictor, plain_config
from privlm.predict.loading import load_adapter
from privlm.settings import cache_dir


def parse_settings(text: str) -> list[tuple[int, int, float]]:
    """``"16:1:5e-3,64:3:5e-3"`` → [(16, 1, 0.005), (64, 3, 0.005)]: batch, epochs, rate."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        parts = item.split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"{item!r} is not batch:epochs:learning-rate")
        batch, epochs, lr = int(parts[0]), int(parts[1]), float(parts[2])
        if batch < 1 or epochs < 1 or not 0 < lr <= 1:
            raise argparse.ArgumentTypeError(f"{item!r}: batch, epochs ≥ 1 and 0 < rate ≤ 1")
        out.append((batch, epochs, lr))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", type=parse_settings, required=True,
                    help="batch:epochs:learning-rate, comma-separated")  # fmt: skip
    ap.add_argument("--unit", default="user", choices=("user", "record"))
    ap.add_argument("--repeat", type=int, default=1, help="which independent run of each "
                    "setting to train (1: the first; K > 1: a further run, its own cache)")  # fmt: skip
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--per-user", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=8, help="WikiText-2 valid articles scored")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--finetuned-from", default="bench/results/user_level_valid_n80.json")
    ap.add_argument("--test", default="", help="a bench_user_level.py test run (same data and "
                    "unit): score the best setting on valid once on its test blocks")  # fmt: skip
    ap.add_argument("--test-out", default="", help="write the --test scores to this file under "
                    "bench/results (the grid file and its test field untouched); default: "
                    "the grid file's test field")  # fmt: skip
    args = ap.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat counts runs from 1")
    data = user_dataset(args.users, args.per_user, args.unit)
    blocks = test_blocks(load_tokenizer(MODEL), args.blocks, args.block_size, "valid")
    ppl: dict[str, float] = {}
    out_path = RESULTS / grid_file(args.unit, args.users, args.per_user)
    saved = json.loads(out_path.read_text()) if out_path.is_file() else {"rows": []}
    root = cache_dir() / "bench" / f"user-level-{args.users}x{args.per_user}" / "dpsgd-grid"
    for batch, epochs, lr in args.settings:
        name = f"{args.unit}-b{batch}-e{epochs}-lr{lr:g}"
        where = root / run_folder(name, args.repeat)
        trained = train_dpsgd_cached(data, where, batch, epochs, lr)
        dp = load_adapter(where, MODEL)
        if not ppl:  # the public model through the first adapter's engine, then the file's check
            ppl["public"] = evaluate(build_predictor(plain_config("public"), dp), blocks).perplexity
            ppl.update(references(
                args.finetuned_from, "valid", len(blocks), ppl["public"], ("finetuned",)
            ))  # fmt: skip
        gap = ppl["public"] - ppl["finetuned"]
        p = evaluate(build_predictor(PlainConfig(members="adapter"), dp), blocks).perplexity
        row = {
            "setting": name, "repeat": args.repeat, "batch_units": batch, "epochs": epochs,
            "lr": lr,
            "perplexity": p, "gap_closed": (ppl["public"] - p) / gap, **trained,
            "command": " ".join(["python", *sys.argv]),
        }  # fmt: skip
        saved["rows"] = [r for r in saved["rows"] if run_key(r) != run_key(row)] + [row]
        print(f"{name}, run {args.repeat}: valid perplexity {p:.3f}, gap closed "
              f"{row['gap_closed']:.1%}, {trained['train_seconds']:.0f} s", flush=True)  # fmt: skip
        saved.update({
            "model": MODEL, "unit": args.unit, "users": args.users, "split": "valid",
            "blocks": len(blocks), "epsilon": EPSILON, "delta": DELTA, "perplexity": ppl,
            "finetuned_from": args.finetuned_from,
        })  # fmt: skip
        RESULTS.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(saved, indent=2))
    best, runs = best_setting(saved["rows"])
    print(f"best on valid so far: {best} ({mean_sd([r['gap_closed'] for r in runs])} over "
          f"{len(runs)} run(s)); wrote {out_path}")  # fmt: skip
    if args.test:
        scores = score_on_test(best, runs, root, args.test)
        gaps = [t["gap_closed"] for t in scores]
        test = {
            "setting": best, "chosen_on": "valid", "runs": scores,
            "gap_closed_mean": statistics.fmean(gaps),
            "gap_closed_sd": statistics.stdev(gaps) if len(gaps) > 1 else None,
        }  # fmt: skip
        if args.test_out:  # a second test set of the same grid keeps its own file
            out_path = RESULTS / args.test_out
            saved = {"grid": grid_file(args.unit, args.users, args.per_user),
                     "test_from": args.test, "test": test,
                     "command": " ".join(["python", *sys.argv])}  # fmt: skip
        else:
            saved["test"] = test
        out_path.write_text(json.dumps(saved, indent=2))
        for t in scores:
            print(
                f"{best}, run {t['repeat']}, on the test ({t['test_tokens']} tokens): "
                f"perplexity {t['perplexity']:.3f}, gap closed {t['gap_closed']:.1%}"
            )
        print(f"{best} on the test: gap closed {mean_sd(gaps)}; wrote {out_path}")


def grid_file(unit: str, users: int, per_user: int) -> str:
    """The grid's JSON: ``dpsgd_grid_{unit}.json`` for the benchmark's data (300 users of 4
    paragraphs), a name of its own for any other, so no row meets another data's."""
    if (users, per_user) == (300, 4):
        return f"dpsgd_grid_{unit}.json"
    return f"dpsgd_grid_{unit}_{users}x{per_user}.json"


def run_folder(setting: str, repeat: int) -> str:
    """A run's cache folder: the setting's name for the first run (as before ``--repeat``),
    ``-r2``, ``-r3``, … after it for further runs."""
    return setting if repeat == 1 else f"{setting}-r{repeat}"


def run_key(row: dict[str, Any]) -> tuple[str, int]:
    """(setting, run) of a grid row; rows written before ``--repeat`` are run 1."""
    return row["setting"], int(row.get("repeat", 1))


def best_setting(rows: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The setting with the highest mean valid gap closed over its runs, and those runs."""
    by_setting: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=run_key):
        by_setting.setdefault(r["setting"], []).append(r)
    best = max(by_setting, key=lambda s: statistics.fmean(r["gap_closed"] for r in by_setting[s]))
    return best, by_setting[best]


def mean_sd(values: list[float]) -> str:
    """``"42.3 %"`` for one value, ``"43.0 % ± 1.0"`` (percentage points) for several."""
    if len(values) == 1:
        return f"{values[0]:.1%}"
    return f"{statistics.fmean(values):.1%} ± {100 * statistics.stdev(values):.1f}"


def score_on_test(
    best: str, runs: list[dict[str, Any]], root: Path, run_file: str
) -> list[dict[str, Any]]:
    """Every run of the chosen setting ``best`` (its grid rows ``runs``, adapters under
    ``root``): each adapter scored on the test blocks of ``run_file`` (a
    ``bench_user_level.py`` test run), against that run's public and fine-tuned perplexities
    (the public model scored once and checked to agree with the file's: the same tokens)."""
    run = json.loads(Path(run_file).read_text())
    if run.get("split", "test") != "test":
        raise SystemExit(f"{run_file} is a {run['split']} run, not a test run")
    blocks = test_blocks(load_tokenizer(MODEL), run["test_blocks"], 128, "test")
    tokens = sum(len(b) - 1 for b in blocks)
    if tokens != run["test_tokens"]:
        raise SystemExit(f"{run_file} scored {run['test_tokens']} tokens, not 128-token blocks")
    scores: list[dict[str, Any]] = []
    for row in runs:
        dp = load_adapter(root / run_folder(best, run_key(row)[1]), MODEL)
        if not scores:  # the public model through the first adapter's engine, once
            public = evaluate(build_predictor(plain_config("public"), dp), blocks).perplexity
            finetuned = references(run_file, "test", len(blocks), public, ("finetuned",))
        p = evaluate(build_predictor(PlainConfig(members="adapter"), dp), blocks).perplexity
        scores.append({
            "setting": best, "repeat": run_key(row)[1], "chosen_on": "valid",
            "valid_gap_closed": row["gap_closed"],
            "test_run": run_file, "test_blocks": len(blocks),
            "test_tokens": tokens, "public": public,
            "finetuned": finetuned["finetuned"], "perplexity": p,
            "gap_closed": (public - p) / (public - finetuned["finetuned"]),
        })  # fmt: skip
    return scores


if __name__ == "__main__":
    main()
