"""How fast every ``privlm … --help`` answers (the settings' modules load no torch).

Baseline, measured in the same run: a bare ``python -c pass`` and ``python -c 'import
torch'`` (what every help took before the config classes moved to torch-free modules).
Each command is timed as the median of ``--repeats`` fresh processes; writes
bench/results/cli_help.json.

    .venv/bin/python bench/bench_cli_help.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cpuinfo import cpu_name

RESULTS = Path(__file__).resolve().parent / "results"
COMMANDS = [
    "--help", "train dpsgd --help", "train jft --help", "generate --help", "eval ppl --help",
    "ensemble train --help", "plan pmixed --help", "prompt dpsgd --help", "prompt pate --help",
    "audit extraction --help", "quickstart --help", "perturb --help", "serve --help",
    "detect redact --help", "account dpsgd --help", "synth --help", "ledger show --help",
]  # fmt: skip


# simple mistakes, refused before any heavy import (run in a scratch folder holding data.csv)
REFUSALS = [
    "synth nope.csv --out x.jsonl", "synth data.csv --out x.jsonl",
    "synth data.csv --out x.jsonl --labels a --label-column topic",
    "train dpsgd nope.csv --out d/", "train dpsgd data.csv --out d/ --user-column who",
    "generate nope/ --prompt Dear", "eval ppl --data nope.jsonl", "ledger show nope.db",
    "account dpsgd --noise-multiplier -1 --sample-rate 0.01 --steps 10",
    "plan pmixed --epsilon -1", "quickstart --blocks 0",
]  # fmt: skip


def median_cpu_seconds(argv: list[str], repeats: int, cwd: Path) -> float:
    """The median CPU time (user + system) of a refused command's fresh process."""
    import resource

    times = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def median_seconds(argv: list[str], repeats: int) -> float:
    """The median wall-clock time of ``argv``'s fresh process."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    python = sys.executable
    bare = median_seconds([python, "-c", "pass"], args.repeats)
    torch = median_seconds([python, "-c", "import torch"], args.repeats)
    torch_cpu = median_cpu_seconds([python, "-c", "import torch"], args.repeats, Path.cwd())
    rows, cpu = {}, {}
    for cmd in COMMANDS:
        argv = [python, "-m", "privlm", *cmd.split()]
        rows[cmd] = median_seconds(argv, args.repeats)
        cpu[cmd] = median_cpu_seconds(argv, args.repeats, Path.cwd())
        print(f"privlm {cmd:<24} {rows[cmd]:.2f} s wall, {cpu[cmd]:.2f} s CPU   "
              f"({rows[cmd] / torch:.2f}× `import torch`'s wall)")  # fmt: skip
    print(f"baseline: python -c pass {bare:.2f} s; python -c 'import torch' {torch:.2f} s wall, "
          f"{torch_cpu:.2f} s CPU")  # fmt: skip
    worst = max(rows.values())
    print(f"slowest help {worst:.2f} s = {worst / torch:.2f}× importing torch alone; "
          f"most CPU {max(cpu.values()):.2f} s")  # fmt: skip
    refused = refusal_cpu(python, args.repeats)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"repeats": args.repeats, "python_bare_s": bare, "import_torch_s": torch,
           "help_s": rows, "slowest_s": worst, "help_cpu_s": cpu,
           "import_torch_cpu_s": torch_cpu, "refusal_cpu_s": refused,
           "cpu": cpu_name()}  # fmt: skip
    (RESULTS / "cli_help.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'cli_help.json'}")


def refusal_cpu(python: str, repeats: int) -> dict[str, float]:
    """CPU seconds of each refusal, against ``python -c 'import torch'``'s in the same run."""
    import tempfile

    torch_cpu = median_cpu_seconds([python, "-c", "import torch"], repeats, Path.cwd())
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "data.csv").write_text("text,label\nhello there,a\nfine day,b\n")
        for cmd in REFUSALS:
            rows[cmd] = median_cpu_seconds(
                [python, "-m", "privlm", *cmd.split()], repeats, Path(scratch)
            )
            print(f"refused: privlm {cmd:<58} {rows[cmd]:.2f} s CPU "
                  f"({rows[cmd] / torch_cpu:.2f}× `import torch`'s CPU)")  # fmt: skip
    print(f"baseline: python -c 'import torch' {torch_cpu:.2f} s CPU")
    return {**rows, "import_torch_cpu_s": torch_cpu}


if __name__ == "__main__":
    main()
