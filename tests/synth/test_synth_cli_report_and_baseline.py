"""``privlm synth``'s curator report (written apart from the release, never inside it) and
``--baseline`` (the no-reference row: no record read, nothing charged)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from privlm.cli import app

runner = CliRunner()
SMALL = ["--model", "tiny", "--count", "2", "--max-tokens", "3", "--members", "2",
         "--prompt-tokens", "16", "--labels", "neg,pos"]  # fmt: skip


def reviews(tmp_path, name="reviews.csv", word="film"):
    data = tmp_path / name
    rows = ["text,label"] + [
        f"the {word} number {i} was {'good' if i % 2 else 'bad'} mail a{i}@example.com,"
        f"{'pos' if i % 2 else 'neg'}"
        for i in range(20)
    ]
    data.write_text("\n".join(rows) + "\n")
    return data


def test_the_report_is_written_apart_and_nothing_released_holds_it(tmp_path):
    out = tmp_path / "synth.jsonl"
    res = runner.invoke(app, ["synth", str(reviews(tmp_path)), "--out", str(out), *SMALL,
                              "--ledger", str(tmp_path / "l.db"), "--canary", "a7@example.com"])  # fmt: skip
    assert res.exit_code == 0, res.output
    report_file = tmp_path / "synth.jsonl.curator.json"
    assert f"report in {report_file}" in res.output and "never share it" in res.output
    body = json.loads(report_file.read_text())
    assert "not private" in body["note"]
    overlap = body["statistics"]["overlap"]
    assert overlap["texts"] == 2 and len(overlap["per_text"]) == 2 and "not DP" in overlap["note"]
    assert overlap["canaries"][0]["records_holding_it"] == 1
    assert body["statistics"]["records"] == 20  # the curator's counts beside it
    for released in (out, tmp_path / "synth.jsonl.privacy.json"):
        text = released.read_text()
        assert "longest_run" not in text and "records_in_batches" not in text, released


def test_no_report_writes_none_and_an_unknown_detector_is_refused_before_any_work(tmp_path):
    data, out = reviews(tmp_path), tmp_path / "synth.jsonl"
    res = runner.invoke(app, ["synth", str(data), "--out", str(out), *SMALL,
                              "--ledger", str(tmp_path / "l.db"), "--no-report"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "synth.jsonl.curator.json").exists()
    bad = runner.invoke(app, ["synth", str(data), "--out", str(tmp_path / "b.jsonl"), *SMALL,
                              "--ledger", str(tmp_path / "b.db"), "--report-detector", "nope"])  # fmt: skip
    assert bad.exit_code == 2 and "unknown detector 'nope'" in bad.output
    assert not (tmp_path / "b.db").exists() and not (tmp_path / "b.jsonl").exists()


def test_the_baseline_reads_no_record_charges_nothing_and_is_the_same_for_any_data(tmp_path):
    """A neighbouring-release test at its extreme: two datasets with no record in common
    give the same baseline texts (the seed fixes the draw), and no ledger is made."""
    outs = []
    for word in ("film", "song"):
        out = tmp_path / f"base-{word}.jsonl"
        res = runner.invoke(app, ["synth", str(reviews(tmp_path, f"{word}.csv", word)),
                                  "--out", str(out), *SMALL, "--seed", "3", "--baseline",
                                  "--ledger", str(tmp_path / "l.db")])  # fmt: skip
        assert res.exit_code == 0, res.output
        assert "no private record was read" in res.output
        outs.append(out.read_text())
    assert outs[0] == outs[1] and len(outs[0].splitlines()) == 2
    assert [json.loads(x)["label"] for x in outs[0].splitlines()] == ["neg", "pos"]
    assert not (tmp_path / "l.db").exists()
    statement = json.loads((tmp_path / "base-film.jsonl.privacy.json").read_text())
    assert statement["format"] == "privlm-synth-baseline/1"
    assert "no private record was read" in statement["guarantee"]


def test_the_baseline_refuses_a_count_it_would_have_to_read_the_data_for(tmp_path):
    res = runner.invoke(app, ["synth", str(reviews(tmp_path)), "--out", str(tmp_path / "b.jsonl"),
                              "--model", "tiny", "--count", "auto", "--baseline"])  # fmt: skip
    assert res.exit_code == 2 and "give --count N" in res.output
