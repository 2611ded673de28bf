"""The CLI: JSON output, the accounting acceptance figure, errors without tracebacks."""

from __future__ import annotations

import json

import pytest
from opacus.accountants import RDPAccountant
from typer.testing import CliRunner

from privlm.accounting import Budget, Charge, PrivacyLedger
from privlm.accounting.relations import Relation
from privlm.cli import app
from tests.conftest import requires_data

runner = CliRunner()
# the DP-SGD plan the foundation issue pins: σ=1.5, q=0.04, 2250 steps, δ=1e-5
PINNED_PLAN = (
    "account", "dpsgd", "--noise-multiplier", "1.5", "--sample-rate", "0.04",
    "--steps", "2250", "--delta", "1e-5",
)  # fmt: skip


def run_json(*args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.fast
def test_account_dpsgd_agrees_with_opacus():
    out = run_json(*PINNED_PLAN)
    acc = RDPAccountant()
    acc.history = [(1.5, 0.04, 2250)]
    eps, order = acc.get_privacy_spent(delta=1e-5)
    assert out["epsilon"] == pytest.approx(eps, rel=1e-4)
    assert out["order"] == order and out["accountant"] == "rdp"


@pytest.mark.fast
def test_account_dpsgd_prv_and_human_output():
    out = run_json(*PINNED_PLAN, "--accountant", "prv")
    assert 6.5 < out["epsilon"] < 7.0 and out["order"] is None
    human = runner.invoke(app, list(PINNED_PLAN))
    assert "best Rényi order α = 3.9" in human.stdout


@pytest.mark.fast
def test_account_calibrate():
    out = run_json(
        "account",
        "calibrate",
        "--epsilon",
        "8",
        "--delta",
        "1e-5",
        "--sample-rate",
        "0.04",
        "--steps",
        "2250",
    )
    assert out["epsilon"] <= 8.0 and 1.3 < out["noise_multiplier"] < 1.5


@pytest.mark.fast
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "account",
                "dpsgd",
                "--noise-multiplier",
                "0",
                "--sample-rate",
                "0.1",
                "--steps",
                "5",
                "--delta",
                "1e-5",
            ],
            "noise multiplier",
        ),
        (
            [
                "account",
                "dpsgd",
                "--noise-multiplier",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "5",
                "--delta",
                "2",
            ],
            "δ must lie",
        ),
        (
            [
                "account",
                "calibrate",
                "--epsilon",
                "-1",
                "--delta",
                "1e-5",
                "--sample-rate",
                "0.1",
                "--steps",
                "5",
            ],
            "target ε",
        ),
        (
            [
                "account",
                "dpsgd",
                "--noise-multiplier",
                "1",
                "--sample-rate",
                "0.1",
                "--steps",
                "5",
                "--delta",
                "1e-5",
                "--accountant",
                "gdp",
            ],
            "unknown accountant",
        ),
        (["data", "inspect", "/no/such/file.txt"], "file not found"),
    ],
)
def test_user_errors_exit_2_with_a_message_and_no_traceback(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output + result.stderr


@pytest.mark.fast
def test_data_inspect(tmp_path):
    p = tmp_path / "notes.jsonl"
    p.write_text(
        '{"text": "a", "user_id": 1}\n{"text": "", "user_id": 1}\n{"text": "b", "user_id": 2}\n'
    )
    out = run_json("data", "inspect", str(p))
    assert out["records"] == 2 and out["units"] == 2 and out["privacy_unit"] == "user"
    assert out["skipped"] == 1
    human = runner.invoke(app, ["data", "inspect", str(p)])
    assert "user (2 units)" in human.stdout


@pytest.mark.fast
@requires_data
def test_data_list():
    rows = run_json("data", "list")
    assert {r["name"] for r in rows} >= {
        "wikitext2",
        "sst2",
        "trec",
        "agnews",
        "cb",
        "rte",
        "conll2003",
    }
    assert all(r["present"] for r in rows)


@pytest.mark.fast
def test_models_list_and_prepare_tiny():
    rows = run_json("models", "list")
    assert [r["name"] for r in rows if r["default"]] == ["smollm2-135m"]
    assert run_json("models", "prepare", "tiny")["name"] == "tiny"


@pytest.mark.fast
def test_ledger_show(tmp_path):
    db = tmp_path / "l.db"
    PrivacyLedger(db, "svc", Budget(4.0, 1e-6)).charge(
        Charge("m", epsilon=1.5, relation=Relation.RECORD)
    )
    out = run_json("ledger", "show", str(db), "--name", "svc")
    assert out["spent"]["epsilon"] == 1.5 and out["remaining_epsilon"] == 2.5
    missing = runner.invoke(app, ["ledger", "show", str(tmp_path / "nope.db")])
    assert missing.exit_code == 2 and "no such ledger" in missing.stderr
    assert run_json("ledger", "show", str(db))["spent"]["epsilon"] == 1.5  # its only ledger
    PrivacyLedger(db, "other", Budget(2.0, 1e-6))
    listed = run_json("ledger", "show", str(db))["ledgers"]
    assert [(r["name"], r["budget"]["epsilon"]) for r in listed] == [("svc", 4.0), ("other", 2.0)]
    unknown = runner.invoke(app, ["ledger", "show", str(db), "--name", "nope"])
    assert unknown.exit_code == 2 and "holds no ledger 'nope'" in unknown.stderr


@requires_data
def test_quickstart_runs_with_the_tiny_model():
    out = run_json(
        "quickstart",
        "--model",
        "tiny",
        "--blocks",
        "2",
        "--block-size",
        "32",
        "--ensemble-size",
        "4",
        "--train-records",
        "40",
        "--new-tokens",
        "4",
    )
    assert out["model"]["name"] == "tiny"
    assert out["perplexity"]["blocks"] == 2 and out["perplexity"]["perplexity"] > 1
    ex = out["dpsgd_example"]
    assert ex["ledger"]["charges_recorded"] == 1
    assert "refused" in ex["ledger"]["second_run_refused"]
    assert ex["sigma_for_epsilon"]["3.0"]["rdp"] > ex["sigma_for_epsilon"]["8.0"]["rdp"]
    pp = out["private_prediction"]
    assert pp["n_models"] == 4 and 1 <= pp["generated_tokens"] <= 4
    assert 0 < pp["generation_epsilon"] <= 8.0 and 0 < pp["eval_epsilon"] <= 8.0
    assert set(pp["perplexity"]) == {"public", "ensemble", "pmixed"}


@requires_data
def test_prompt_eval_runs_where_it_is_told(tmp_path):
    """The prompt commands take --device and --dtype and say what they used."""
    import json

    from typer.testing import CliRunner

    from privlm.cli import app

    res = CliRunner().invoke(app, [
        "prompt", "eval", "--model", "tiny", "--test", "4", "--device", "cpu",
        "--dtype", "bfloat16", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["device"], out["dtype"]) == ("cpu", "bfloat16") and out["test"] == 4


def test_synth_writes_labelled_texts_and_its_statement(tmp_path):
    data = tmp_path / "reviews.csv"
    rows = ["text,label"] + [
        f"review number {i} says {'yes' if i % 2 else 'no'},{'pos' if i % 2 else 'neg'}"
        for i in range(20)
    ]
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "synth.jsonl"
    args = ["synth", str(data), "--out", str(out), "--model", "tiny", "--count", "2",
            "--max-tokens", "3", "--members", "2", "--prompt-tokens", "16",
            "--labels", "neg,pos", "--ledger", str(tmp_path / "l.db"), "--json"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{") :])
    assert report["written"] == 2 and report["statement"]["guarantee"] == "(8, 1e-05)-DP per record"
    assert report["not_private_for_the_curator"]["records"] == 20
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == ["neg", "pos"]
    assert '"records"' not in (tmp_path / "synth.jsonl.privacy.json").read_text()
    again = runner.invoke(app, args)  # the budget is spent: refused, with the reason
    assert again.exit_code == 2 and "synth" in again.output
    unlabelled = runner.invoke(
        app,
        [
            "synth",
            str(data),
            "--out",
            str(tmp_path / "o2.jsonl"),
            "--model",
            "tiny",
            "--ledger",
            str(tmp_path / "l2.db"),
        ],
    )
    assert unlabelled.exit_code == 2 and "--labels" in unlabelled.output
