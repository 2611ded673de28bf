"""The README's and docs/service.md's ``privlm`` lines run in order, as a user runs them, on
the tiny model at tiny sizes (tests/cli/readme_blocks.py says what changes and what is
skipped): every line succeeds and none prints a warning, privlm's own or a library's, in
a process of its own (no test harness's warning filters apply)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.cli.readme_blocks import ROOT, lines

# a warning, or privlm's own words for an example that will not do what it is run for
WARNING = re.compile(r"(?i)warning|will read as unrelated words|will barely move")
PROGRESS = re.compile(r"^\d+ +[\d.]+ s  ")  # the driver's own line per command


def test_the_docs_say_what_runs_and_why_the_rest_does_not():
    docs = [line for line in lines() if line.skip is None]
    assert sum(line.doc == "README.md" for line in docs) >= 40
    assert sum(line.doc == "service.md" for line in docs) >= 2
    assert all(line.args[0] != "serve" for line in docs)
    assert all("tiny" in line.args for line in docs if "--model" in line.args)


@pytest.mark.timeout(900)
def test_the_readme_and_service_docs_run_in_order_on_the_tiny_model(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "tests.cli.readme_blocks", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    ran = [entry for entry in report if "skipped" not in entry]
    failed = [f"{e['written']}\n{e['output'][-1500:]}" for e in ran if e["exit_code"] != 0]
    assert not failed, "\n\n".join(failed)
    warned = [
        f"{e['written']}\n  {line}"
        for e in ran
        for line in e["output"].splitlines()
        if WARNING.search(line)
    ]
    assert not warned, "\n".join(warned)
    outside = [
        ln for ln in run.stderr.splitlines() if WARNING.search(ln) and not PROGRESS.match(ln)
    ]
    assert not outside, "\n".join(outside)  # printed past the runner: a logger's own stream
