"""The private-prediction CLI on the tiny model: train, plan, generate, evaluate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from privlm.accounting import PrivacyLedger
from privlm.cli import app
from tests.conftest import requires_data

runner = CliRunner()


def ok(*args):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output + str(result.exception)
    return result


@pytest.fixture(scope="module")
def ensembles(tmp_path_factory):
    root = tmp_path_factory.mktemp("ens")
    common = ["--model", "tiny", "--epochs", "1", "--block-size", "32", "--lr", "0.01"]
    data = root / "notes.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"text": f"note {i} about case {i % 7}", "user_id": i % 12})
            for i in range(60)
        )
    )
    ok("ensemble", "train", str(data), "--out", str(root / "pm"), "--parts", "4", *common, "--json")
    ok(
        "ensemble",
        "train",
        str(data),
        "--out",
        str(root / "sm"),
        "--parts",
        "2",
        "--protocol",
        "submix",
        *common,
    )
    return root


def test_train_manifest(ensembles):
    manifest = json.loads((ensembles / "pm" / "manifest.json").read_text())
    assert manifest["privacy_unit"] == "user" and manifest["units"] == 12
    assert "note" not in (ensembles / "pm" / "manifest.json").read_text()


def test_generate_charges_the_ledger(ensembles, tmp_path):
    db = tmp_path / "l.db"
    out = json.loads(
        ok(
            "generate",
            str(ensembles / "pm"),
            "--prompt",
            "note",
            "--ledger",
            str(db),
            "--queries",
            "10",
            "--sample-rate",
            "0.5",
            "--max-new-tokens",
            "4",
            "--seed",
            "1",
            "--json",
        ).stdout
    )
    assert len(out["token_ids"]) == out["queries_used"] == PrivacyLedger(db, "default").count()
    refused = runner.invoke(
        app,
        [
            "generate",
            str(ensembles / "pm"),
            "--prompt",
            "x",
            "--ledger",
            str(db),
            "--temperature",
            "0.5",
        ],
    )
    assert refused.exit_code == 2 and "temperature" in refused.stderr
    wrong = runner.invoke(
        app, ["generate", str(ensembles / "sm"), "--prompt", "x", "--ledger", str(db)]
    )
    assert wrong.exit_code == 2 and "submix ensemble" in wrong.stderr


def test_generate_warns_when_one_ensemble_gets_a_second_budget(ensembles, tmp_path):
    """Two ledger names for one ensemble are two budgets for the same data: the ensemble
    records each one it is deployed under, and the second draws a warning."""
    from privlm.predict.budget_names import budgets_used

    ens = tmp_path / "pm"
    import shutil

    shutil.copytree(ensembles / "pm", ens)
    (ens / "budgets.json").unlink(missing_ok=True)  # other tests deployed the shared one
    args = ["generate", str(ens), "--prompt", "note", "--ledger", str(tmp_path / "l.db"),
            "--queries", "4", "--sample-rate", "0.5", "--max-new-tokens", "1"]  # fmt: skip
    first = ok(*args, "--name", "alpha")
    assert "more than one budget" not in first.stderr
    again = ok(*args, "--name", "alpha")
    assert "more than one budget" not in again.stderr
    second = ok(*args, "--name", "beta")
    assert "more than one budget" in second.stderr and "--name alpha" in second.stderr
    assert [b["name"] for b in budgets_used(ens)] == ["alpha", "beta"]
    assert all(b["ledger"] == str((tmp_path / "l.db").resolve()) for b in budgets_used(ens))


def test_generate_submix(ensembles, tmp_path):
    out = json.loads(
        ok(
            "generate",
            str(ensembles / "sm"),
            "--method",
            "submix",
            "--prompt",
            "note",
            "--ledger",
            str(tmp_path / "s.db"),
            "--epsilon",
            "1",
            "--alpha",
            "2",
            "--max-new-tokens",
            "3",
            "--json",
        ).stdout
    )
    assert out["extra"]["private_tokens"] + out["extra"]["public_tokens"] == len(out["token_ids"])


@requires_data
@pytest.mark.parametrize("method", ["public", "finetuned", "ensemble", "pmixed", "screened"])
def test_eval_ppl(ensembles, method):
    out = json.loads(
        ok(
            "eval",
            "ppl",
            "--method",
            method,
            "--ensemble",
            str(ensembles / "pm"),
            "--blocks",
            "1",
            "--block-size",
            "16",
            *(["--sample-rate", "0.5"] if method in ("pmixed", "screened") else []),
            "--runs",
            "2",
            "--seed",
            "0",
            "--json",
        ).stdout
    )
    assert out["queries_per_run"] == 15 and len(out["runs"]) == 2 and out["perplexity"] > 1
    spent = out["runs"][0]["epsilon_spent"]
    assert (spent == 0.0) == (method not in ("pmixed", "screened"))
    if method in ("pmixed", "screened"):
        assert 0 < spent <= 8.0
    if method == "screened":
        assert out["runs"][0]["queries_used"] <= 256  # its paid tokens; the rest were free


def test_generate_screened(ensembles, tmp_path):
    from privlm.predict.screened import PAID

    db = tmp_path / "l.db"
    args = ["generate", str(ensembles / "pm"), "--method", "screened", "--prompt", "note",
            "--ledger", str(db), "--paid-tokens", "2", "--threshold", "0", "--sample-rate",
            "0.5", "--max-new-tokens", "6", "--seed", "3"]  # fmt: skip
    out = json.loads(ok(*args, "--json").stdout)
    extra = out["extra"]
    assert extra["free_tokens"] + extra["paid_tokens"] + extra["public_tokens"] == len(
        out["token_ids"]
    )
    charges = PrivacyLedger(db, "default").charges()
    assert sum(c.mechanism == PAID for c in charges) == extra["paid_tokens"] <= 2
    assert 0 < out["epsilon_spent"] <= 8.0
    text = ok(*args[:-2], "--name", "other")
    assert "free" in text.stderr and "paid" in text.stderr
    assert "of T=2 private tokens left" in text.stderr and "ε spent" in text.stderr
    refused = runner.invoke(app, [*args, "--when-spent", "refuse"])
    assert refused.exit_code == 2 and "when_spent=refuse" in refused.stderr


@pytest.mark.fast
def test_plan_screened():
    from privlm.predict.config import ScreenedPMixEDConfig

    out = json.loads(ok("plan", "screened", "--paid-tokens", "64", "--json").stdout)
    cfg = ScreenedPMixEDConfig(paid_tokens=64)
    assert out["paid_tokens"] == 64 and out["free_tokens"] == "unbounded"
    assert out["instance_epsilon"] == pytest.approx(cfg.split()[0])
    assert out["radius"] == pytest.approx(cfg.query_cost(80)[0])
    assert out["lifetime_epsilon"] <= 8.0 + 1e-9 and "replaced" in out["relation"]
    text = ok("plan", "screened", "--paid-tokens", "1024").stdout
    assert "c=1024 paid tokens" in text and "coin" in text  # the noise is too wide there


@pytest.mark.fast
def test_plan_pmixed():
    out = json.loads(
        ok(
            "plan",
            "pmixed",
            "--epsilon",
            "8",
            "--delta",
            "1e-5",
            "--alpha",
            "3",
            "--queries",
            "1024",
            "--sample-rate",
            "0.03",
            "--ensemble-size",
            "80",
            "--json",
        ).stdout
    )
    assert len(out["paper_beta_at_realised_size"]) == 10 and out["ball_order"] == 6.0
    assert out["bound"] == "replacement" and out["per_unit"] and "replaced" in out["relation"]
    assert out["radius"] == pytest.approx(0.833, abs=5e-4)
    assert out["per_part_radius_for_comparison"]["expansion"] == pytest.approx(0.925, abs=5e-4)
    assert out["per_query_rdp_charged"] <= out["per_query_rdp_budget"]
    assert out["rdp_budget"] == pytest.approx(3.198, abs=1e-3)


def test_generate_places_the_model_as_asked_and_says_so(ensembles, tmp_path):
    """--device/--dtype, recorded in the --json output; a seed warns."""
    res = ok(
        "generate", str(ensembles / "pm"), "--prompt", "note", "--ledger", str(tmp_path / "l.db"),
        "--queries", "4", "--max-new-tokens", "2", "--device", "cpu", "--dtype", "bfloat16",
        "--seed", "3", "--json",
    )  # fmt: skip
    out = json.loads(res.stdout)
    assert (out["device"], out["dtype"]) == ("cpu", "bfloat16")
    assert out["seed"] == 3 and "knows the seed" in out["warning"]
    assert "knows the seed" in res.stderr
    bad = runner.invoke(
        app, ["generate", str(ensembles / "pm"), "--prompt", "x", "--dtype", "int4"]
    )
    assert bad.exit_code == 2 and "unknown dtype" in bad.stderr


def test_in_context_members_train_nothing_and_generate_under_the_per_unit_budget(tmp_path):
    """``ensemble train --members in-context``: no adapter is trained; each part's records
    are its member's prompt (private, owner-only); ``generate`` charges per token and says
    how many tokens are left beside ε and why ε grows fast at first."""
    data = tmp_path / "notes.jsonl"
    data.write_text(
        "\n".join(json.dumps({"text": f"note {i} about case {i % 7}"}) for i in range(40))
    )
    out = tmp_path / "ic"
    trained = ok("ensemble", "train", str(data), "--out", str(out), "--parts", "10",
                 "--members", "in-context", "--prompt-tokens", "16", "--model", "tiny")  # fmt: skip
    assert "in-context members" in trained.stdout and "cut at 16 tokens" in trained.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["member_kind"] == "in-context" and manifest["prompt_tokens"] == 16
    assert not any(p.is_dir() for p in out.iterdir())  # no adapter directories
    prompts = out / "member-prompts.json"
    assert oct(prompts.stat().st_mode & 0o777) == "0o600"
    assert len(json.loads(prompts.read_text())["prompts"]) == 10
    db = tmp_path / "l.db"
    gen = ok("generate", str(out), "--prompt", "note", "--ledger", str(db), "--queries", "20",
             "--sample-rate", "1", "--max-new-tokens", "3", "--seed", "1")  # fmt: skip
    assert "17 of T=20 private tokens left" in gen.stderr, gen.stderr
    assert "ε grows fast at first" in gen.stderr
    assert PrivacyLedger(db, "default").count() == 3
