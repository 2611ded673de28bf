"""A newcomer's first hour with the CLI: the default ledger, refusals that leave nothing
behind, and user-level labelled data under ``privlm synth``'s defaults (tiny model)."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from privlm.accounting import PrivacyLedger
from privlm.accounting.ledger import ledger_names
from privlm.cli import app

runner = CliRunner()
LABELS = ("billing", "outage", "account")


def data_ledger(path: str = "privlm-ledger.db") -> PrivacyLedger:
    """The one ledger in ``path`` (the default ledger file in the cwd)."""
    (name,) = ledger_names(path)
    return PrivacyLedger(path, name)


@pytest.fixture
def tickets(tmp_path, monkeypatch):
    """100 support tickets of 36 users in 3 labels, in a scratch working directory."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tickets.csv"
    write_tickets(path)
    return path


def synth(*extra: str):
    args = ["synth", "tickets.csv", "--out", "s.jsonl", "--model", "tiny", "--count", "3",
            "--max-tokens", "3", "--prompt-tokens", "16", *extra]  # fmt: skip
    return runner.invoke(app, args)


def test_synth_defaults_on_user_level_labelled_data_run_within_their_epsilon(tickets):
    res = synth("--labels", ",".join(LABELS), "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{") :])
    assert report["written"] == 3 and report["statement"]["epsilon"] <= 8
    ledger = data_ledger()  # the default ledger, in the cwd
    assert ledger.budget.epsilon == 8 and ledger.spent().epsilon <= 8


def test_a_refused_run_leaves_no_ledger_and_a_retry_gets_its_budget(tickets):
    res = synth()  # labelled data, no --labels: refused before any charge
    assert res.exit_code == 2 and "--labels" in res.output
    assert not (tickets.parent / "privlm-ledger.db").exists()
    res = synth("--labels", ",".join(LABELS), "--budget-epsilon", "20")
    assert res.exit_code == 0, res.output
    assert data_ledger().budget.epsilon == 20


def test_an_existing_ledger_refuses_another_budget_and_says_how_to_share_one(tickets):
    assert synth("--labels", ",".join(LABELS)).exit_code == 0
    res = synth("--labels", ",".join(LABELS), "--budget-epsilon", "30", "--out", "u.jsonl")
    assert res.exit_code == 2 and "sets the budget of a new ledger only" in res.output
    res = synth("--labels", ",".join(LABELS), "--resume")  # same out: resumes, pays nothing
    assert res.exit_code == 0, res.output
    (tickets.parent / "s.jsonl").unlink()
    res = runner.invoke(app, [
        "synth", "tickets.csv", "--out", "t.jsonl", "--model", "tiny", "--count", "3",
        "--max-tokens", "3", "--labels", ",".join(LABELS),
    ])  # fmt: skip
    assert res.exit_code == 2 and "--budget-epsilon covering them all" in res.output


@pytest.mark.parametrize(("flag", "what"), [("--label-column", "label"), ("--user-column", "user")])
def test_a_named_column_that_is_not_there_is_refused_with_the_columns_found(tickets, flag, what):
    res = synth("--labels", ",".join(LABELS), flag, "topic")
    assert res.exit_code == 2
    assert f"no 'topic' column for the {what}" in res.output and "'user_id'" in res.output
    assert not (tickets.parent / "privlm-ledger.db").exists()


def test_dpsgd_with_too_few_steps_to_train_warns(tickets):
    res = runner.invoke(app, [
        "train", "dpsgd", "tickets.csv", "--out", "dp/", "--model", "tiny", "--epsilon", "3",
        "--batch-size", "64", "--physical-batch-size", "8", "--block-size", "16",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "warning: only 1 noisy step" in res.stderr and "Lower --batch-size" in res.stderr


def test_a_training_run_prints_no_third_party_warning_that_privlm_causes(tickets):
    """peft's FutureWarning about transformers' ``is_gradient_checkpointing`` on every model
    it wrapped, and its "Unable to fetch remote file" on every adapter saved, filled
    ``make demo``'s log. A real process, so no test harness's warning filters apply."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-W", "default", "-m", "privlm", "train", "dpsgd", "tickets.csv",
         "--out", "dp/", "--model", "tiny", "--epsilon", "3", "--batch-size", "8",
         "--block-size", "16", "--epochs", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    for noise in ("is_gradient_checkpointing", "Unable to fetch remote file",
                  "Could not find a config file", "Secure RNG turned off",
                  "Full backward hook is firing", "Detected no triton"):  # fmt: skip
        assert noise not in run.stderr, run.stderr[-2000:]


def test_progress_bars_off_a_terminal_are_plain_lines(capsys):
    """A log of ``make demo`` held carriage returns and nested bars' ``[A`` escapes."""
    import io

    from privlm.progress import progress_bar

    log = io.StringIO()  # not a terminal
    with progress_bar(total=3, desc="outer", file=log) as outer:
        for _ in progress_bar(range(4), desc="inner", file=log):
            pass
        outer.update(3)
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines and all(line.startswith(("outer", "inner")) for line in lines), lines
    assert any("3/3" in line for line in lines) and any("4/4" in line for line in lines)


def test_a_finished_plain_bar_prints_its_last_line_once(monkeypatch):
    import io

    import privlm.progress
    from privlm.progress import progress_bar

    monkeypatch.setattr(privlm.progress, "PLAIN_INTERVAL_S", 0)  # print every refresh
    log = io.StringIO()
    for _ in progress_bar(range(4), desc="steps", file=log, miniters=1):
        pass
    lines = log.getvalue().splitlines()
    assert sum("4/4" in line for line in lines) == 1, lines  # closing repeats no line
    assert sum("/4" in line for line in lines) == 5, lines  # 0/4 … 4/4, each once


def test_a_plain_bar_repeats_no_count_whose_bar_width_changed():
    """tqdm sizes a bar's body to fill its width, so a closing refresh whose rate has more
    digits draws a shorter body for the same count: it is still the same line."""
    import io

    from privlm.progress import PlainLines

    log = io.StringIO()
    plain = PlainLines(log)
    plain.write("\rsteps: 100%|##########| 4/4 [00:00<00:00, 9.1it/s]")
    plain.write("\rsteps: 100%|########| 4/4 [00:00<00:00, 12345.67it/s]")
    assert log.getvalue().splitlines() == ["steps: 100%|##########| 4/4 [00:00<00:00, 9.1it/s]"]


def write_tickets(path, transform=lambda t: t):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "label", "text"])
        for i in range(100):
            label = LABELS[i % 3]
            w.writerow(
                [f"u{i % 36}", label, transform(f"My {label} ticket {i}: I was charged twice.")]
            )


def test_two_bodies_of_records_get_two_default_budgets(tickets):
    """The README runs synth on reviews.csv, then on notes.jsonl: the second is not refused
    by the first's budget."""
    assert synth("--labels", ",".join(LABELS)).exit_code == 0
    write_tickets(tickets.parent / "other.csv", lambda t: t.replace("ticket", "request"))
    res = runner.invoke(app, ["synth", "other.csv", "--out", "o.jsonl", "--model", "tiny",
                              "--count", "3", "--max-tokens", "3", "--prompt-tokens", "16",
                              "--labels", ",".join(LABELS)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert len(ledger_names("privlm-ledger.db")) == 2


def test_a_copy_in_another_case_and_order_draws_on_the_same_budget(tickets):
    assert synth("--labels", ",".join(LABELS)).exit_code == 0
    spent = data_ledger().spent().epsilon
    copy = tickets.parent / "copy.csv"
    write_tickets(copy, str.upper)  # the same records, upper-cased
    rows = copy.read_text().splitlines()
    copy.write_text("\n".join([rows[0], *reversed(rows[1:])]) + "\n")
    res = runner.invoke(app, ["synth", "copy.csv", "--out", "c.jsonl", "--model", "tiny",
                              "--count", "3", "--max-tokens", "3", "--prompt-tokens", "16",
                              "--labels", ",".join(LABELS)])  # fmt: skip
    assert res.exit_code == 2 and "budget" in res.output  # the one budget is spent
    assert len(ledger_names("privlm-ledger.db")) == 1 and data_ledger().spent().epsilon == spent


def test_a_default_ledger_name_says_nothing_outside_its_file(tickets, tmp_path):
    from privlm.cli.common import records_ledger_name

    texts = ["one private note", "another"]
    a = records_ledger_name(tmp_path / "a.db", texts)
    assert a == records_ledger_name(tmp_path / "a.db", list(reversed(texts)))
    assert a != records_ledger_name(tmp_path / "b.db", texts)  # keyed by each file's secret


def test_eval_ppl_without_the_corpora_scores_the_shipped_head_and_says_so(tickets, monkeypatch):
    """The README's ``eval ppl`` line names no file: on a fresh machine, with no corpora
    fetched, it scores the head of WikiText-2 that ships with privlm, as the quickstart does."""
    monkeypatch.setenv("PRIVLM_DATA", str(tickets.parent / "no-corpora-here"))
    res = runner.invoke(app, ["eval", "ppl", "--model", "tiny", "--blocks", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert "head of WikiText-2's validation split that ships with privlm" in res.stderr
    assert json.loads(res.stdout)["perplexity"] > 1
