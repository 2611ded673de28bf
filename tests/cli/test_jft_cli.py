"""``privlm train jft`` and ``privlm detect`` as a user runs them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from privlm.cli import app
from tests.conftest import requires_data


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def notes(tmp_path):
    data = tmp_path / "notes.txt"
    data.write_text(
        "\n".join(f"Alice Jones called on {i} May about ticket AB{1000 + i}" for i in range(30))
    )
    return data


def test_train_jft_direct_prints_the_sdp_statement(tmp_path):
    res = run(
        "train", "jft", notes(tmp_path), "--out", tmp_path / "m", "--detector", "regex",
        "--model", "tiny", "--batch-size", "10", "--physical-batch-size", "5",
        "--block-size", "16", "--ledger", tmp_path / "l.db", "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["phase1_mode"] == "direct" and out["epsilon"] <= 3.0
    assert "redacted_token_fraction" not in out["phase1"]  # exact: for the curator only
    assert out["not_private_for_the_curator"]["phase1.redacted_token_fraction"] > 0
    assert (tmp_path / "m" / "sdp.json").is_file()
    assert not (tmp_path / "m-phase1").exists()  # not private: kept only with --phase1-out
    assert not any(p.name.startswith(".m-phase1") for p in tmp_path.iterdir())


@pytest.mark.fast
def test_train_jft_light_noise_without_annotations_is_a_user_error(tmp_path):
    res = run(
        "train", "jft", notes(tmp_path), "--out", tmp_path / "m", "--phase1", "light-noise",
        "--model", "tiny", "--ledger", tmp_path / "l.db",
    )  # fmt: skip
    assert res.exit_code == 2
    assert "--annotated" in res.output


@pytest.mark.fast
def test_detect_redact_shows_masks(tmp_path):
    res = run("detect", "redact", notes(tmp_path), "--detector", "regex", "--limit", "2", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["records"]
    assert len(rows) == 2
    assert "AB1000" not in rows[0]["redacted"] and "<mask>" in rows[0]["redacted"]


@pytest.mark.fast
def test_detect_miss_rate(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(
        "".join(
            json.dumps({"text": f"Bob paid {i}", "secrets": ["Bob", str(i)]}) + "\n"
            for i in range(20)
        )
    )
    res = run("detect", "miss-rate", path, "--detector", "regex", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # each record: 3 words, "Bob" missed: m = 1/3 in every group
    assert abs(out["mean"] - 1 / 3) < 1e-9 and out["high"] - out["low"] < 1e-9


@pytest.mark.fast
@requires_data
def test_detect_eval_on_conll():
    res = run("detect", "eval", "--detector", "low-entity", "--limit", "30", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    (r,) = out["results"]
    assert out["texts"] == 30 and out["input"] == "CoNLL-2003 testb"
    assert 0.4 < r["overlap_recall"] <= 1 and set(r["recall_by_type"]) <= {
        "PER",
        "LOC",
        "ORG",
        "MISC",
    }


def test_detect_redact_show_labels_each_caught_span(tmp_path):
    res = run("detect", "redact", notes(tmp_path), "--limit", "1", "--show")
    assert res.exit_code == 0, res.output
    assert "[Alice Jones|" in res.output and "[AB1000|" in res.output
    js = run("detect", "redact", notes(tmp_path), "--limit", "1", "--json")
    spans = json.loads(js.stdout)["records"][0]["spans"]
    assert {"start", "end", "label", "text"} <= set(spans[0])
    assert json.loads(js.stdout)["detector"] == "pii"  # the default


@pytest.mark.fast
def test_detect_corpus_eval_and_miss_rate_on_the_pii_corpus(tmp_path):
    path = tmp_path / "pii.jsonl"
    res = run("detect", "corpus", path, "--n", "60", "--seed", "2")
    assert res.exit_code == 0, res.output
    assert len(path.read_text().splitlines()) == 60
    res = run("detect", "eval", "--data", path, "--detector", "pii-patterns", "--json")
    assert res.exit_code == 0, res.output
    (r,) = json.loads(res.stdout)["results"]
    assert r["texts"] == 60 and "STREET_ADDRESS" in r["recall_by_type"]
    table = run("detect", "eval", "--data", path, "--detector", "pii-patterns")
    assert "full-span recall" in table.output and "over-redaction" in table.output
    res = run("detect", "miss-rate", path, "--detector", "regex")
    assert res.exit_code == 0, res.output
    assert "per sensitive token" in res.output and "per token (JFT's m)" in res.output


@pytest.mark.fast
def test_detect_eval_refuses_an_unknown_corpus():
    res = run("detect", "eval", "--corpus", "nope")
    assert res.exit_code != 0 and "unknown corpus" in res.output


def test_train_jft_with_too_few_steps_to_train_warns(tmp_path):
    res = run(
        "train", "jft", notes(tmp_path), "--out", tmp_path / "m", "--detector", "regex",
        "--model", "tiny", "--block-size", "16", "--ledger", tmp_path / "l.db",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "warning: only 1 noisy step" in res.stderr and "Lower --batch-size" in res.stderr
