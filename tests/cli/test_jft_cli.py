"""``privlm train jft`` and ``privlm detect`` as a user runs them."""

from __future__ import annotations

import json

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
    assert out["phase1"]["redacted_token_fraction"] > 0
    assert (tmp_path / "m" / "sdp.json").is_file()
    assert (tmp_path / "m-phase1" / "adapter_config.json").is_file()


def test_train_jft_light_noise_without_annotations_is_a_user_error(tmp_path):
    res = run(
        "train", "jft", notes(tmp_path), "--out", tmp_path / "m", "--phase1", "light-noise",
        "--model", "tiny", "--ledger", tmp_path / "l.db",
    )  # fmt: skip
    assert res.exit_code == 2
    assert "--annotated" in res.output


def test_detect_redact_shows_masks(tmp_path):
    res = run("detect", "redact", notes(tmp_path), "--detector", "regex", "--limit", "2", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["records"]
    assert len(rows) == 2
    assert "AB1000" not in rows[0]["redacted"] and "<mask>" in rows[0]["redacted"]


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


@requires_data
def test_detect_eval_on_conll():
    res = run("detect", "eval", "--detector", "low-entity", "--limit", "30", "--json")
    assert res.exit_code == 0, res.output
    (r,) = json.loads(res.stdout)["results"]
    assert r["sentences"] == 30 and 0.4 < r["token_recall"] <= 1
