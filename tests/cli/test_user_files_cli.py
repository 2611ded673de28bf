"""Through the CLI: files as users have them (renamed and positional columns,
.gz) for every command that reads one, held-out perplexity on the user's own file for the
public model, an adapter and an ensemble, and token usage reported by training."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from privlm.cli import app

NOTES = [f"patient {i} was seen on monday; call 555-01{i:02d} to follow up" for i in range(24)]


@pytest.fixture
def notes_csv_gz(tmp_path):
    rows = "\n".join(f"u{i // 3},{note}" for i, note in enumerate(NOTES))  # no header
    path = tmp_path / "notes.csv.gz"
    path.write_bytes(gzip.compress(rows.encode()))
    return path


def invoke(*args):
    res = CliRunner().invoke(app, [*map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.fast
def test_detect_redact_reads_a_headerless_gzipped_csv(notes_csv_gz):
    out = invoke("detect", "redact", notes_csv_gz, "--detector", "regex", "--no-header",
                 "--text-column", 2, "--limit", 2)  # fmt: skip
    assert len(out["records"]) == 2 and "<mask>" in out["records"][0]["redacted"]


def test_ensemble_training_reads_positional_columns_and_reports_token_usage(notes_csv_gz, tmp_path):
    out = invoke("ensemble", "train", notes_csv_gz, "--no-header", "--text-column", 2,
                 "--user-column", 1, "--parts", 2, "--epochs", 1, "--block-size", 16,
                 "--max-blocks", 2, "--model", "tiny", "--out", tmp_path / "ens",
                 "--partition-key", "5eed" * 8)  # fmt: skip
    # a fixed key: a fresh one leaves one of the 2 parts of 8 users empty 1 time in 128
    assert out["privacy_unit"] == "user" and out["units"] == 8
    curator = out["not_private_for_the_curator"]["adapters"]
    usages = [a["token_usage"] for a in curator.values()]
    assert all(a.keys() == {"status", "path"} for a in out["adapters"].values())
    assert all(u["used"] == 2 * 16 and u["dropped"] == u["tokens"] - 32 for u in usages)
    assert all("the cap of 2 blocks" in u["summary"] for u in usages)

    ppl = invoke("eval", "ppl", "--ensemble", tmp_path / "ens", "--method", "ensemble",
                 "--data", notes_csv_gz, "--no-header", "--text-column", 2,
                 "--block-size", 16)  # fmt: skip
    assert ppl["data"] == str(notes_csv_gz) and ppl["perplexity"] > 1
    assert ppl["queries_per_run"] > 4 * 15  # all of the file, not 4 blocks of WikiText-2


def test_eval_ppl_scores_the_public_model_and_one_adapter_on_a_users_file(tmp_path):
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("\n".join(json.dumps({"note": n}) for n in NOTES))
    train = tmp_path / "train.txt"
    train.write_text("\n".join(NOTES))
    res = CliRunner().invoke(app, [*map(str, [
        "train", "dpsgd", train, "--model", "tiny", "--epochs", 1, "--block-size", 16,
        "--ledger", tmp_path / "l.db", "--out", tmp_path / "lora", "--json"])])  # fmt: skip
    assert res.exit_code == 0, res.output
    # the default δ is min(1/n^1.1, 1e-6): strong, so privlm's own weak-δ warning is silent
    stated = json.loads(res.stdout)
    assert stated["delta"] == 1e-6 and stated["delta_warning"] is None
    assert "is weak for" not in res.stderr
    assert "Weak δ" not in (tmp_path / "lora" / "README.md").read_text()
    common = ["--data", held_out, "--text-column", "note", "--block-size", 16]
    public = invoke("eval", "ppl", *common, "--model", "tiny")
    tuned = invoke("eval", "ppl", *common, "--adapter-dir", tmp_path / "lora")
    assert public["method"] == "public" and tuned["method"] == "finetuned"
    assert tuned["model"] == "tiny"  # the adapter's privacy.json names its public model
    assert public["queries_per_run"] == tuned["queries_per_run"] > 60
    assert tuned["perplexity"] != public["perplexity"]
    res = CliRunner().invoke(app, ["eval", "ppl", *map(str, common), "--method", "pmixed"])
    assert res.exit_code == 2 and "needs --ensemble" in res.output
