"""``privlm synth --generator dp-lora`` on the tiny model: the statement is DP-SGD's, computed
from the recorded charge; refused before any work; charged once, before the adapter is
saved; a resumed run neither trains nor pays again (docs/sharp_edges.md, "DP synthetic
text")."""

from __future__ import annotations

import json

import dp_accounting
import pytest

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.statements import recorded_guarantee
from privlm.data.records import Dataset, Record
from privlm.errors import PrivlmError
from privlm.synth import SynthConfig, dp_lora, synthesize, synthesize_baseline
from privlm.synth.run import run_folder, statement_path

LABELS = ["neg", "pos"]
CFG = dict(generator="dp-lora", count=5, max_tokens=5, seed=3, train_batch_size=6,
           train_epochs=1, epsilon=4.0)  # fmt: skip


def data(unit: str = "record", n: int = 24, extra_label: bool = False) -> Dataset:
    recs = [
        Record(f"the film {i} was {'fine' if i % 2 else 'dull'}",
               f"u{i % 8}" if unit == "user" else f"r{i}", "pos" if i % 2 else "neg")
        for i in range(n)
    ]  # fmt: skip
    if extra_label:
        recs.append(Record("a text of a label nobody declared", "r-x", "other"))
    return Dataset(recs, "mem", unit)


def run(tiny, tmp_path, ds, ledger=None, name="a", resume=False, **kw):
    out = tmp_path / name / "synth.jsonl"
    out.parent.mkdir(exist_ok=True)
    cfg = SynthConfig(**{**CFG, **kw})
    return out, synthesize(tiny, ds, out, cfg, labels=LABELS, ledger=ledger, progress=False,
                           resume=resume)  # fmt: skip


def ledger(tmp_path, epsilon=10.0):
    return PrivacyLedger(tmp_path / "ledger.db", "data", Budget(epsilon, 1e-5))


@pytest.mark.parametrize("unit", ["record", "user"])
def test_the_statement_is_dp_sgds_and_computed_from_the_recorded_charge(tiny, tmp_path, unit):
    led = ledger(tmp_path)
    out, res = run(tiny, tmp_path, data(unit), led)
    st = json.loads(statement_path(out).read_text())
    assert st == res.statement and st["generator"] == "dp-lora"
    (record,) = led.charges()
    assert record.params["run"] and record.params["generator"] == "dp-lora"
    assert record.relation.value == unit
    recorded = recorded_guarantee(led, lambda r: True, 1e-5)
    assert st["epsilon"] == pytest.approx(recorded.epsilon) and st["delta"] == 1e-5
    assert st["guarantee"] == recorded.text and f"per {unit}" in st["guarantee"]
    # independently: dp-accounting's RDP accountant on the released σ, q and steps
    acc = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(
        st["sample_rate"], dp_accounting.GaussianDpEvent(st["noise_multiplier"])
    )
    acc.compose(dp_accounting.SelfComposedDpEvent(event, st["steps"]))
    independent = acc.get_epsilon(1e-5)
    assert independent <= 4.0 * 1.001 and independent == pytest.approx(st["epsilon"], rel=0.02)
    assert st["units"] == 24 if unit == "record" else 8  # declared public, as in DP-SGD
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == ["neg", "neg", "neg", "pos", "pos"]
    assert (run_folder(out) / dp_lora.ADAPTER / "adapter_config.json").is_file()
    assert "records" not in st and res.curator["records"] == 24


def test_a_run_that_would_not_fit_is_refused_before_any_work(tiny, tmp_path, monkeypatch):
    import privlm.training.dpsgd as dpsgd

    monkeypatch.setattr(dpsgd, "fit_dpsgd", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(PrivlmError, match="budget"):
        run(tiny, tmp_path, data(), ledger(tmp_path, epsilon=2.0))
    out = tmp_path / "a" / "synth.jsonl"
    assert not out.exists() and not run_folder(out).exists()


def test_a_resumed_run_neither_trains_nor_pays_again(tiny, tmp_path, monkeypatch):
    led = ledger(tmp_path)
    calls = {"n": 0}
    real = dp_lora.AdapterSampler.texts

    def stop_after_one(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(dp_lora.AdapterSampler, "texts", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        run(tiny, tmp_path, data(), led)
    out = tmp_path / "a" / "synth.jsonl"
    first = out.read_text().splitlines()
    assert len(first) == 3 and led.count() == 1  # the neg chunk, written and marked
    monkeypatch.setattr(dp_lora.AdapterSampler, "texts", real)
    import privlm.training.dpsgd as dpsgd

    monkeypatch.setattr(dpsgd, "fit_dpsgd", lambda *a, **k: pytest.fail("trained again"))
    with pytest.raises(PrivlmError, match="resume"):
        run(tiny, tmp_path, data(), led)
    _, res = run(tiny, tmp_path, data(), led, resume=True)
    rows = out.read_text().splitlines()
    assert rows[:3] == first and len(rows) == 5 and res.written == 5
    assert led.count() == 1


def test_charged_but_not_saved_refits_without_a_second_charge(tiny, tmp_path, monkeypatch):
    import privlm.fsutil as fsutil

    led = ledger(tmp_path)
    real = fsutil.write_directory_atomically

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "write_directory_atomically", crash)
    with pytest.raises(KeyboardInterrupt):
        run(tiny, tmp_path, data(), led)
    assert led.count() == 1  # charged durably before the adapter was written
    out = tmp_path / "a" / "synth.jsonl"
    assert not (run_folder(out) / dp_lora.ADAPTER).exists()
    monkeypatch.setattr(fsutil, "write_directory_atomically", real)
    _, res = run(tiny, tmp_path, data(), led, resume=True)
    assert res.written == 5 and led.count() == 1


def test_records_of_undeclared_labels_are_not_trained_on():
    cfg = SynthConfig(**CFG)
    train = dp_lora.training_data(data(extra_label=True), LABELS, cfg)
    assert len(train.records) == 24
    assert all(r.text.startswith(f"{cfg.description}\nLabel: {r.label}\nText: ") for r in train)
    assert all(r.text.endswith("\n") and r.text.count("\n") == 3 for r in train)


def test_the_block_size_is_public():
    from privlm.models import load_tokenizer

    tok = load_tokenizer("tiny")
    cfg = SynthConfig(**CFG)
    assert dp_lora.block_size(tok, cfg, LABELS) == dp_lora.block_size(tok, cfg, LABELS)
    longer = SynthConfig(**{**CFG, "max_tokens": 50})
    assert dp_lora.block_size(tok, longer, LABELS) == dp_lora.block_size(tok, cfg, LABELS) + 45


def test_dp_lora_needs_a_count():
    with pytest.raises(PrivlmError, match="count"):
        SynthConfig(**{**CFG, "auto_count": True})


def test_the_baseline_samples_the_public_model_with_no_adapter(tiny, tmp_path):
    out = tmp_path / "base.jsonl"
    res = synthesize_baseline(tiny, out, SynthConfig(**CFG), labels=LABELS, progress=False)
    st = json.loads(statement_path(out).read_text())
    assert st["format"] == "privlm-synth-baseline/1" and st["generator"] == "dp-lora"
    assert res.written == 5 and len(out.read_text().splitlines()) == 5


def test_a_seeded_run_is_reproducible_and_the_callers_model_unchanged(tiny, tmp_path):
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    out_a, _ = run(tiny, tmp_path, data(), name="a")
    out_b, _ = run(tiny, tmp_path, data(), name="b")
    assert out_a.read_text() == out_b.read_text()
    after = tiny.model.state_dict()
    assert before.keys() == after.keys()
    assert all((before[k] == after[k]).all() for k in before)


def test_a_model_shared_with_an_engine_is_reloaded_not_copied():
    """A public model whose projections an engine wrapped (its router holds a lock) is
    loaded again for training, not deep-copied with the wrappers."""
    from privlm.models import load_public_model, working_copy
    from privlm.predict.engine import model_router

    lm = load_public_model("tiny")
    model_router(lm.model)
    copy_ = working_copy(lm, "cpu", "float32")
    assert copy_.model is not lm.model and copy_.reference == "tiny"
    assert not hasattr(copy_.model, "_privlm_router")
