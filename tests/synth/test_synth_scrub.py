"""``privlm synth --scrub pii``: the records are scrubbed by a secret detector before any
generator sees them, after the budget check, with ε unchanged and the pre-step named in the
statement (privlm.synth.scrub)."""

from __future__ import annotations

import json

import pytest

from privlm.accounting import Budget, PrivacyLedger
from privlm.data.records import Dataset, Record
from privlm.errors import PrivlmError
from privlm.synth import SynthConfig, dp_lora, synthesize
from privlm.synth.run import statement_path
from privlm.synth.scrub import scrub_text, scrubbed

LABELS = ["neg", "pos"]
EMAIL = "jane.doe{i}@example.com"


def data(n: int = 12) -> Dataset:
    recs = [
        Record(f"write to {EMAIL.format(i=i)} about film {i}", f"r{i}", LABELS[i % 2])
        for i in range(n)
    ]  # fmt: skip
    return Dataset(recs, "mem", "record")


def test_each_span_becomes_its_type_and_overlaps_are_one():
    from privlm.detect.base import Span

    text = "Ann Lee at ann@x.org"
    spans = [Span(0, 3, "PERSON"), Span(0, 7, "PERSON|NAME"), Span(11, 20, "EMAIL")]
    assert scrub_text(text, spans) == "[PERSON] at [EMAIL]"
    assert scrub_text(text, []) == text


def test_scrubbing_keeps_every_record_unit_and_label():
    ds = data()
    out = scrubbed(ds, "regex")
    assert [(r.unit, r.label) for r in out] == [(r.unit, r.label) for r in ds]
    assert all("@" not in r.text and "[EMAIL]" in r.text for r in out)
    assert scrubbed(ds, "none") is ds
    assert ds.records[0].text.startswith("write to jane.doe0@")  # the caller's data unchanged


def test_an_unknown_detector_is_refused_when_the_run_is_configured():
    with pytest.raises(PrivlmError, match="unknown detector 'nope'"):
        SynthConfig(scrub="nope")


def _ledger(tmp_path, epsilon):
    return PrivacyLedger(tmp_path / "ledger.db", "data", Budget(epsilon, 1e-5))


def test_the_in_context_generator_sees_only_scrubbed_records_at_the_same_charge(
    tiny, tmp_path, monkeypatch
):
    import privlm.synth.run as run

    seen: list[str] = []
    original = run.plan_batches

    def spy(ds, *a, **k):
        seen.extend(r.text for r in ds)
        return original(ds, *a, **k)

    monkeypatch.setattr(run, "plan_batches", spy)
    cfg = dict(count=2, max_tokens=3, members=3, prompt_tokens=24, seed=1)
    statements = []
    for name, scrub in (("plain", "none"), ("scrubbed", "regex")):
        seen.clear()
        out = tmp_path / name / "synth.jsonl"
        led = PrivacyLedger(tmp_path / f"{name}.db", "data", Budget(10.0, 1e-5))
        synthesize(tiny, data(), out, SynthConfig(**cfg, scrub=scrub), labels=LABELS,
                   ledger=led, progress=False)  # fmt: skip
        statements.append(json.loads(statement_path(out).read_text()))
    assert seen and all("@" not in t and "[EMAIL]" in t for t in seen)
    plain, scrubbed_st = statements
    assert "scrub" not in plain and scrubbed_st["scrub"].startswith("regex: ")
    assert scrubbed_st["epsilon"] == plain["epsilon"]  # a per-record pre-step: ε unchanged


def test_the_dp_lora_generator_trains_on_scrubbed_records(tiny, tmp_path, monkeypatch):
    trained: list[str] = []
    original = dp_lora.fit_and_save

    def spy(lm, train, *a, **k):
        trained.extend(r.text for r in train)
        return original(lm, train, *a, **k)

    monkeypatch.setattr(dp_lora, "fit_and_save", spy)
    cfg = SynthConfig(generator="dp-lora", count=2, max_tokens=4, seed=2, train_batch_size=6,
                      train_epochs=1, epsilon=4.0, scrub="regex")  # fmt: skip
    out = tmp_path / "synth.jsonl"
    synthesize(tiny, data(), out, cfg, labels=LABELS, ledger=_ledger(tmp_path, 10.0),
               progress=False)  # fmt: skip
    assert len(trained) == 12 and all("[EMAIL]" in t and "@" not in t for t in trained)
    assert json.loads(statement_path(out).read_text())["scrub"].startswith("regex: ")


def test_a_refused_run_scrubs_nothing(tiny, tmp_path, monkeypatch):
    import privlm.detect as detect

    monkeypatch.setattr(detect, "make_detector", lambda *a, **k: pytest.fail("scrubbed"))
    cfg = SynthConfig(count=2, max_tokens=3, members=3, epsilon=4.0, scrub="regex")
    with pytest.raises(PrivlmError, match="budget"):
        synthesize(tiny, data(), tmp_path / "s.jsonl", cfg, labels=LABELS,
                   ledger=_ledger(tmp_path, 1.0), progress=False)  # fmt: skip
