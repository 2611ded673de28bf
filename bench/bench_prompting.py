"""Private prompt learning with SmolLM2-135M (Flocks of Stochastic Parrots).

For each task (SST-2, TREC, AG News), on TEST test examples:
- the zero-shot lower bound (calibrated);
- the best and mean non-private one-shot accuracy over ONESHOT random prompts (upper bound);
- PromptPATE with TEACHERS one-shot teachers labelling PUBLIC public inputs, in-distribution
  (the task's own training split, labels dropped) and out-of-distribution (another corpus):
  teacher and ensemble accuracy, released-label accuracy, student accuracy, ε (δ = 1/N);
- the prompt MIA AUC against non-private one-shot prompts and against the student.
For SST-2 also PromptDPSGD, soft prompt and prefix, at ε = 8, ε = 3 and without noise.

Usage: python bench/bench_prompting.py [--tasks sst2,trec,agnews] [--test 200]
Writes bench/results/prompting.json after every task.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from privlm.audit.prompt_mia import auc_standard_error, prompt_mia, student_mia
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.prompting.evaluate import accuracy, prompt_probabilities
from privlm.prompting.pate_pipeline import (
    PateExamples,
    PromptPateConfig,
    pate_ledger,
    run_prompt_pate,
)
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
from privlm.prompting.serving import prompt_adapter_accuracy
from privlm.prompting.splits import task_splits
from privlm.prompting.tasks import get_task
from privlm.settings import cache_dir

RESULTS = Path(__file__).parent / "results"
MODEL = "smollm2-135m"
# out-of-distribution public inputs: another corpus's texts, no labels used
OOD = {
    "sst2": ("trec", "TREC questions"),
    "trec": ("sst2", "SST-2 sentences"),
    "agnews": ("sst2", "SST-2 sentences"),
}


def ood_public(task_name: str, n: int, seed: int) -> list[Record]:
    source, _ = OOD[task_name]
    recs = get_task(source).load(get_task(source).splits[0]).records
    pick = np.random.default_rng(seed).permutation(len(recs))[:n]
    return [Record(recs[int(i)].text, f"ood{i}", None) for i in pick]


def mia_control(lm, task, members, nonmembers, row: dict) -> None:
    """The student's MIA AUC beside its standard error and a control: the same members and
    non-members scored under the zero-shot prompt, which contains none of them. An AUC is
    evidence of leakage only as far as it departs from the control by several SEs."""
    control = student_mia(lm.model, lm.tokenizer, task, [], members, nonmembers)
    row["student_mia_control_auc"] = control.auc
    row["student_mia_se"] = auc_standard_error(
        row["student_mia_auc"], len(members), len(nonmembers)
    )


def reference_points(lm, task, splits, test, teachers: int, r: dict) -> None:
    """Zero-shot (lower bound) and non-private one-shot (upper bound) accuracy."""
    t = time.perf_counter()
    r["zero_shot"] = accuracy(
        prompt_probabilities(lm.model, lm.tokenizer, task, [], test), task, test
    )
    accs = [
        accuracy(prompt_probabilities(lm.model, lm.tokenizer, task, [d], test), task, test)
        for d in splits.private[teachers:]
    ]
    r["one_shot"] = {"best": max(accs), "mean": float(np.mean(accs)), "prompts": len(accs)}
    r["reference_seconds"] = time.perf_counter() - t
    print(
        f"{task.name}: zero-shot {r['zero_shot']:.3f}, one-shot best {max(accs):.3f} "
        f"mean {np.mean(accs):.3f}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="sst2,trec,agnews")
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--oneshot", type=int, default=8)
    ap.add_argument("--teachers", type=int, default=50)
    ap.add_argument("--public", type=int, default=200)
    ap.add_argument("--mia-prompts", type=int, default=50)
    ap.add_argument("--dpsgd-private", type=int, default=1000)
    ap.add_argument("--teacher-votes", default="labels", choices=("top1", "labels"))
    ap.add_argument("--skip-dpsgd", action="store_true")
    ap.add_argument(
        "--resume", action="store_true", help="keep the parts already in the results file"
    )
    args = ap.parse_args()
    lm = load_public_model(MODEL)
    root = cache_dir() / "bench" / "prompting"
    root.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / "prompting.json"
    results: dict = json.loads(out_path.read_text())["tasks"] if out_path.is_file() else {}

    def save() -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out_path.write_text(
            json.dumps({"model": MODEL, "args": vars(args), "tasks": results}, indent=2)
        )

    for name in args.tasks.split(","):
        task = get_task(name)
        r: dict = results.setdefault(name, {})
        splits = task_splits(task, args.teachers + args.oneshot, args.public, args.test, seed=0)
        test = splits.test
        t = time.perf_counter()
        if not (args.resume and "one_shot" in r):
            reference_points(lm, task, splits, test, args.teachers, r)
        private = splits.private[: args.teachers]
        for kind, public in (
            ("in-distribution", splits.public),
            ("out-of-distribution", ood_public(name, args.public, 0)),
        ):
            members, nonmembers = private, splits.public[: 2 * len(private)]
            done = r.get(f"pate_{kind}", {})
            if args.resume and "student_test_accuracy" in done:
                if "student_mia_control_auc" not in done:
                    mia_control(lm, task, members, nonmembers, done)
                    save()
                continue
            cfg = PromptPateConfig(
                teachers=args.teachers, threshold=args.teachers * 0.5, sigma_threshold=args.teachers * 0.2,
                sigma=args.teachers * 0.1, epsilon=8.0, holdout=min(60, args.public // 3), student_candidates=12,
                teacher_votes=args.teacher_votes,
            )  # fmt: skip
            led_path = root / f"{name}-{kind}.db"
            led_path.unlink(missing_ok=True)
            led = pate_ledger(led_path, "pate", cfg, len(private))
            t = time.perf_counter()
            try:
                res = run_prompt_pate(
                    lm, PateExamples(task, private, public), root / f"student-{name}-{kind}",
                    cfg, ledger=led,
                )  # fmt: skip
            except PrivlmError as e:  # e.g. too few public inputs pass the threshold check
                r[f"pate_{kind}"] = {"error": str(e), "seconds": time.perf_counter() - t}
                print(f"  PromptPATE ({kind}): {e}", flush=True)
                save()
                continue
            student = res.student.records()
            acc = accuracy(
                prompt_probabilities(lm.model, lm.tokenizer, task, student, test), task, test
            )
            mia = student_mia(lm.model, lm.tokenizer, task, student, members, nonmembers)
            r[f"pate_{kind}"] = {
                **{k: v for k, v in res.to_dict().items() if k not in ("config",)},
                "public_source": "task train split" if kind == "in-distribution" else OOD[name][1],
                "student_test_accuracy": acc, "student_mia_auc": mia.auc,
                "seconds": time.perf_counter() - t, "config": res.config,
            }  # fmt: skip
            mia_control(lm, task, members, nonmembers, r[f"pate_{kind}"])
            print(
                f"  PromptPATE ({kind}): student {acc:.3f}, ε {res.epsilon:.3f}, {res.answered}/{res.queries} labelled, ensemble {res.ensemble_accuracy}, MIA {mia.auc:.3f}",
                flush=True,
            )
            save()
        if args.resume and "mia_one_shot" in r:
            continue
        t = time.perf_counter()
        pool = splits.public + splits.private
        m = prompt_mia(lm.model, lm.tokenizer, task, pool, prompts=args.mia_prompts, nonmembers=50)
        r["mia_one_shot"] = {**m.to_dict(), "seconds": time.perf_counter() - t}
        print(f"  MIA against non-private one-shot prompts: AUC {m.auc:.3f}", flush=True)
        save()
    if "sst2" in args.tasks.split(",") and not args.skip_dpsgd:
        task = get_task("sst2")
        splits = task_splits(task, args.dpsgd_private, 0, args.test, seed=1)
        rows = results["sst2"].setdefault("prompt_dpsgd", {})
        for kind in ("soft-prompt", "prefix"):
            for eps in (None, 8.0, 3.0):
                label = f"{kind}, " + ("non-private" if eps is None else f"ε={eps:g}")
                if args.resume and label in rows:
                    continue
                cfg = PromptDpSgdConfig(
                    kind=kind,
                    noise="none" if eps is None else "target-epsilon",
                    target_epsilon=8.0 if eps is None else eps,
                    epochs=1,
                    batch_size=32,
                    learning_rate=1e-2 if kind == "soft-prompt" else 5e-3,
                )
                t = time.perf_counter()
                out = root / f"sst2-{kind}-{eps}"
                st = train_prompt_dpsgd(MODEL, TaskExamples(task, splits.private), out, cfg)
                seconds = time.perf_counter() - t
                acc = prompt_adapter_accuracy(MODEL, out, task, splits.test)
                rows[label] = {**st.to_dict(), "test_accuracy": acc, "train_seconds": seconds}
                print(f"  PromptDPSGD {label}: accuracy {acc:.3f} ({seconds:.0f} s)", flush=True)
                save()
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
