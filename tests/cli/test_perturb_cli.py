"""``privlm perturb`` and ``privlm service tenant-create`` from the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from privlm.cli import app

pytestmark = pytest.mark.fast

runner = CliRunner()


def test_perturb_a_file_with_the_gaussian_mechanism(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("Jane Doe lives in Paris\nher number is 555 0101\n")
    out = tmp_path / "out.txt"
    res = runner.invoke(
        app,
        ["perturb", str(src), "--out", str(out), "--mechanism", "gaussian", "--epsilon", "10",
         "--delta", "1e-6", "--vocabulary", "3000", "--seed", "1", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["words"] == 10 and report["per_word"]["delta"] == 1e-6
    assert report["per_document"]["epsilon"] > report["per_line_max"]["epsilon"] > 10
    lines = out.read_text().splitlines()
    assert [len(x.split()) for x in lines] == [5, 5]
    again = runner.invoke(
        app,
        ["perturb", str(src), "--mechanism", "gaussian", "--epsilon", "10", "--delta", "1e-6",
         "--vocabulary", "3000", "--seed", "1"],
    )  # fmt: skip
    assert again.stdout.splitlines()[:2] == lines  # seeded runs repeat (tests only)


def test_perturb_refuses_bad_parameters(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    for args in (["--epsilon", "0"], ["--mechanism", "bogus"],
                 ["--epsilon", "1", "--mechanism", "gaussian", "--delta", "2"]):  # fmt: skip
        res = runner.invoke(app, ["perturb", str(src), *args])
        assert res.exit_code == 2 and "error:" in res.output, args
    res = runner.invoke(app, ["perturb", str(tmp_path / "missing.txt"), "--epsilon", "1"])
    assert res.exit_code == 2 and "no such file" in res.output


def test_perturb_defaults_to_a_readable_epsilon_and_says_the_trade_off(tmp_path):
    """Without --epsilon the text still reads (the least ε measured to keep three words in
    four on public text), and the line beside the guarantee says how much comes through;
    the README's example once used ε = 20, where next to no word survives."""
    from privlm.perturb import readability

    src = tmp_path / "in.txt"
    src.write_text("Why did my bill go up this month ?\n")
    res = runner.invoke(app, ["perturb", str(src), "--vocabulary", "3000", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["per_word"]["epsilon"] == readability.default_epsilon("laplace") == 150
    assert report["readability"]["share_unchanged"] >= readability.READABLE_SHARE
    plain = runner.invoke(app, ["perturb", str(src), "--mechanism", "gaussian"])
    assert plain.exit_code == 0, plain.output
    assert "per word ε = 300, δ = 1e-05" in plain.output
    assert "% of words come through unchanged" in plain.output
    low = runner.invoke(app, ["perturb", str(src), "--epsilon", "20"])
    assert "train a model poorly" in low.output


def test_tenant_create_prints_the_key_once_and_stores_its_hash(tmp_path):
    res = runner.invoke(
        app, ["service", "tenant-create", "acme", "--data-dir", str(tmp_path), "--json"]
    )
    assert res.exit_code == 0, res.output
    key = json.loads(res.stdout)["api_key"]
    assert key.startswith("plm_")
    assert key.encode() not in (tmp_path / "privlm-service.db").read_bytes()
    dup = runner.invoke(app, ["service", "tenant-create", "acme", "--data-dir", str(tmp_path)])
    assert dup.exit_code == 2 and "already exists" in dup.output
