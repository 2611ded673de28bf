"""Through the CLI: a task privlm does not ship, from a task file and the user's
own labelled CSV, with an out-of-distribution public file, end to end on the tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from privlm.accounting import PrivacyLedger
from privlm.accounting.ledger import ledger_names
from privlm.cli import app

TASK = """\
name: ticket-topic
labels: {billing: Billing, outage: Outage, account: Account}
template: "Ticket ({channel}): {text}\\nTopic:"
columns: {text: body, label: topic, user: customer, channel: via}
"""
TOPICS = {
    "billing": ["my invoice is wrong", "charged twice this month", "refund the payment"],
    "outage": ["the site is down", "cannot reach the server", "service unavailable"],
    "account": ["reset my password", "cannot log in", "change my e-mail address"],
}


def ticket_rows(n, user_prefix, records_per_user=1):
    topics = list(TOPICS)
    for i in range(n):
        topic = topics[i % 3]
        yield f"{user_prefix}{i // records_per_user},mail,{TOPICS[topic][i % 2]} #{i},{topic}"


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the runs' default ledger, ./privlm-ledger.db
    (tmp_path / "tickets.yaml").write_text(TASK)
    header = "customer,via,body,topic"
    (tmp_path / "private.csv").write_text(
        "\n".join([header, *ticket_rows(60, "c", records_per_user=2)]) + "\n"
    )
    (tmp_path / "test.csv").write_text("\n".join([header, *ticket_rows(6, "t")]) + "\n")
    # out of distribution: news headlines, not tickets, and no labels
    headlines = [{"body": f"storm closes roads in region {i}", "via": "web"} for i in range(24)]
    (tmp_path / "public.jsonl").write_text("\n".join(map(json.dumps, headlines)) + "\n")
    return tmp_path


def invoke(*args):
    res = CliRunner().invoke(app, [*map(str, args), "--model", "tiny", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_prompt_pate_on_an_unshipped_task_with_an_out_of_distribution_public_file(files):
    out = invoke(
        "prompt", "pate", "--task-file", files / "tickets.yaml",
        "--private-data", files / "private.csv", "--public-data", files / "public.jsonl",
        "--test-data", files / "test.csv", "--teachers", 8, "--teacher-votes", "labels",
        "--threshold", 0, "--sigma-threshold", 1, "--sigma", 1, "--epsilon", 100,
        "--candidates", 2, "--holdout", 3, "--ledger", files / "l.db", "--out", files / "student",
    )  # fmt: skip
    assert out["task"] == "ticket-topic" and out["queries"] == 24 and out["answered"] >= 4
    assert out["label_accuracy"] is None  # the public file has no labels to compare with
    assert 0 <= out["student_test_accuracy"] <= 1
    (name,) = ledger_names(files / "l.db")  # the private data's budget
    ledger = PrivacyLedger(files / "l.db", name)
    assert ledger.spent().epsilon == pytest.approx(out["epsilon"])
    student = json.loads((files / "student" / "student_prompt.json").read_text())
    assert student["task"] == "ticket-topic"
    assert all(d["channel"] == "web" and "storm" in d["text"] for d in student["demos"])
    assert "invoice" not in json.dumps(student)  # built from public inputs only


def test_prompt_dpsgd_eval_and_mia_on_an_unshipped_task(files):
    common = ["--task-file", files / "tickets.yaml", "--private-data", files / "private.csv"]
    res = CliRunner().invoke(app, ["prompt", "dpsgd", *map(str, common), "--model", "tiny",
                                   "--out", str(files / "sp")])  # fmt: skip
    assert res.exit_code == 2 and "--unit user" in res.output  # users with two records each
    out = invoke("prompt", "dpsgd", *common, "--unit", "user", "--test-data", files / "test.csv",
                 "--epochs", 1, "--batch-size", 10, "--out", files / "sp")  # fmt: skip
    assert (out["unit"], out["units"], out["records_left_out"]) == ("user", 30, 30)
    (name,) = ledger_names("privlm-ledger.db")  # charged by default, to the data's budget
    assert name.startswith("data-")
    assert PrivacyLedger("privlm-ledger.db", name).spent().epsilon == pytest.approx(out["epsilon"])
    assert out["task"] == "ticket-topic" and 0 <= out["test_accuracy"] <= 1
    statement = json.loads((files / "sp" / "privacy.json").read_text())
    assert statement["unit"] == "user" and statement["task"] == "ticket-topic"
    assert "-DP per user" in (files / "sp" / "README.md").read_text()  # privlm's model card
    ev = invoke("prompt", "eval", *common, "--test-data", files / "test.csv", "--shots", 1,
                "--prompts", 2)  # fmt: skip
    assert ev["task"] == "ticket-topic" and ev["test"] == 6 and len(ev["accuracies"]) == 2
    mia = invoke("prompt", "mia", *common, "--prompts", 3, "--nonmembers", 4)
    assert 0 <= mia["auc"] <= 1


@pytest.mark.fast
def test_task_file_errors_reach_the_user_without_content(files):
    bad = files / "bad.csv"
    bad.write_text("customer,via,body,topic\nc1,mail,Jane Roe owes 300,refunds\n")
    res = CliRunner().invoke(app, [
        "prompt", "pate", "--task-file", str(files / "tickets.yaml"), "--private-data", str(bad),
        "--public-data", str(files / "public.jsonl"), "--model", "tiny", "--out", str(files / "o"),
    ])  # fmt: skip
    assert res.exit_code == 2
    assert "bad.csv:2: field 'topic': the label is not one of task ticket-topic's" in res.output
    assert "Jane" not in res.output and "refunds" not in res.output
    both = CliRunner().invoke(app, ["prompt", "eval", "--task", "sst2", "--task-file",
                                    str(files / "tickets.yaml")])  # fmt: skip
    assert both.exit_code == 2 and "not both" in both.output


def test_prompt_pate_refuses_public_data_that_holds_private_records(files):
    """The public inputs leave verbatim in the student prompt: a public file sharing records
    with the private one is refused with the count, never the text, and nothing is charged."""
    res = CliRunner().invoke(
        app,
        [
            "prompt", "pate", "--task-file", str(files / "tickets.yaml"),
            "--private-data", str(files / "private.csv"), "--public-data",
            str(files / "private.csv"), "--test-data", str(files / "test.csv"),
            "--teachers", "8", "--ledger", str(files / "l.db"), "--out", str(files / "s"),
            "--model", "tiny",
        ],
    )  # fmt: skip
    assert res.exit_code != 0
    assert "60 of the" in res.output and "verbatim" in res.output
    assert "invoice" not in res.output and not (files / "s").exists()
    assert not (files / "l.db").exists()  # refused before a charge: no ledger left behind


def test_prompt_dpsgd_with_too_few_steps_to_train_warns(files):
    res = CliRunner().invoke(app, [
        "prompt", "dpsgd", "--task-file", str(files / "tickets.yaml"), "--private-data",
        str(files / "private.csv"), "--unit", "user", "--model", "tiny", "--epochs", "1",
        "--out", str(files / "sp"),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "warning: only 1 noisy step" in res.stderr and "Lower --batch-size" in res.stderr


def test_prompt_pate_and_prompt_dpsgd_on_one_file_draw_on_one_budget(files):
    common = ["--task-file", files / "tickets.yaml", "--private-data", files / "private.csv"]
    pate = invoke("prompt", "pate", *common, "--public-data", files / "public.jsonl",
                  "--teachers", 8, "--teacher-votes", "labels", "--threshold", 0,
                  "--sigma-threshold", 1, "--sigma", 1, "--queries", 6, "--candidates", 2,
                  "--holdout", 2, "--epsilon", 100, "--out", files / "student")  # fmt: skip
    sp = invoke("prompt", "dpsgd", *common, "--unit", "user", "--epochs", 1, "--batch-size",
                10, "--out", files / "sp")  # fmt: skip
    (name,) = ledger_names("privlm-ledger.db")
    ledger = PrivacyLedger("privlm-ledger.db", name)
    assert ledger.budget.epsilon == 100 and ledger.count() == 6 + 1
    assert ledger.spent().epsilon >= max(pate["epsilon"], sp["epsilon"])
