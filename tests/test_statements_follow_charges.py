"""Every statement privlm writes beside a release is computed from the charges its ledger
recorded (privlm.accounting.statements; docs/sharp_edges.md): for each training mechanism
and each unit, the statement's ε equals what the ledger's records of the run compose to,
and its unit is the relation the records carry. A statement restated from the settings
(the target ε) or from another accountant than the charge's would fail here."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.statements import recorded_guarantee
from privlm.data import Dataset, Record
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
from privlm.prompting.tasks import get_task
from privlm.training import dpsgd as dp
from privlm.training.jft import train_jft
from tests.training.test_jft import annotated
from tests.training.test_jft import cfg as jft_cfg
from tests.training.test_jft import dataset as jft_dataset

TRAIN = dict(batch_size=16, physical_batch_size=4, epochs=1, block_size=24, learning_rate=1e-2)


def _records(n: int, users: int | None) -> Dataset:
    recs = [
        Record(f"record {i} says the value is {i * 7 % 13}",
               f"user-{i % users}" if users else f"record-{i}", line=i)
        for i in range(n)
    ]  # fmt: skip
    return Dataset(recs, "mem", "user" if users else "record")


def _ledger(tmp_path, name="data") -> PrivacyLedger:
    return PrivacyLedger(tmp_path / "l.db", name, Budget(50.0, 1e-5))


def _recorded(ledger: PrivacyLedger, delta: float):
    return recorded_guarantee(ledger, lambda r: True, delta)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
@pytest.mark.parametrize("users", [None, 8])
def test_dpsgd_states_what_its_charge_records(tmp_path, users, accountant):
    ledger = _ledger(tmp_path)
    cfg = dp.DpSgdConfig(target_epsilon=3.0, accountant=accountant, **TRAIN)
    st = dp.train_dpsgd("tiny", _records(48, users), tmp_path / "a", cfg, ledger=ledger,
                        progress=False)  # fmt: skip
    got = _recorded(ledger, st.delta)
    assert st.epsilon == pytest.approx(got.epsilon, rel=1e-9)
    assert got.relation.noun == ("user" if users else "record") == st.unit


@pytest.mark.parametrize("unit", ["record", "user"])
def test_prompt_dpsgd_states_what_its_charge_records(tmp_path, unit):
    words = ["great", "awful", "fine film", "boring and long", "a delight"]
    recs = [
        Record(f"{words[i % 5]} {i}", f"user-{i}" if unit == "user" else f"r{i}",
               "positive" if i % 2 else "negative")
        for i in range(30)
    ]  # fmt: skip
    ledger = _ledger(tmp_path)
    cfg = PromptDpSgdConfig(virtual_tokens=3, target_epsilon=3.0, batch_size=10, epochs=1,
                            unit=unit)  # fmt: skip
    st = train_prompt_dpsgd("tiny", TaskExamples(get_task("sst2"), recs), tmp_path / "p", cfg,
                            ledger=ledger, progress=False)  # fmt: skip
    got = _recorded(ledger, st.delta)
    assert st.epsilon == pytest.approx(got.epsilon, rel=1e-9)
    assert got.relation.noun == unit == st.unit


@pytest.mark.parametrize("phase1", ["direct", "light-noise"])
def test_jft_states_what_its_charges_record(tmp_path, phase1):
    extra = {"annotated_file": annotated(tmp_path / "a.jsonl")} if phase1 == "light-noise" else {}
    ledger = _ledger(tmp_path)
    st = train_jft("tiny", jft_dataset(), tmp_path / "m", jft_cfg(phase1=phase1, **extra),
                   phase1_dir=tmp_path / "m-phase1", ledger=ledger, progress=False)  # fmt: skip
    got = _recorded(ledger, st.delta)
    assert ledger.count() == (2 if phase1 == "light-noise" else 1)
    assert st.epsilon == pytest.approx(got.epsilon, rel=1e-9)
    assert got.relation.noun == "record"


def _labelled(users: int | None, n: int = 24) -> Dataset:
    recs = [
        Record(f"the film {i} was {'fine' if i % 2 else 'dull'}",
               f"user-{i % users}" if users else f"record-{i}", "pos" if i % 2 else "neg")
        for i in range(n)
    ]  # fmt: skip
    return Dataset(recs, "mem", "user" if users else "record")


@pytest.mark.parametrize("mechanism", ["pmixed", "dclip", "screened"])
@pytest.mark.parametrize("users", [None, 6])
@pytest.mark.parametrize("count", ["4", "auto"])
def test_synth_states_what_its_charges_record(tiny, tmp_path, mechanism, users, count):
    """With labels, a user is in one batch per label: the statement is per user all the
    same, because the run is charged (and each text planned) for every batch a user can
    reach; the DP count, when asked for, is a charge of its own that the statement adds."""
    from privlm.synth import SynthConfig, synthesize

    ledger = _ledger(tmp_path)
    cfg = SynthConfig(max_tokens=3, members=3, prompt_tokens=24, mechanism=mechanism,
                      epsilon=4.0, **({"auto_count": True} if count == "auto" else {"count": 4}))  # fmt: skip
    res = synthesize(tiny, _labelled(users), tmp_path / "s.jsonl", cfg, labels=["neg", "pos"],
                     ledger=ledger, progress=False)  # fmt: skip
    st = res.statement
    got = _recorded(ledger, st["delta"])
    assert ledger.count() == (2 if count == "auto" else 1)
    assert st["epsilon"] == pytest.approx(got.epsilon, rel=1e-9) and st["epsilon"] <= 4 + 1e-9
    unit = "user" if users else "record"
    assert got.relation.noun == unit and st["guarantee"] == got.text


@pytest.mark.parametrize("users", [None, 6])
def test_prompt_pate_states_what_its_charges_record(tmp_path, users):
    from privlm.prompting.config import PromptPateConfig
    from privlm.prompting.pate_pipeline import PateExamples, run_prompt_pate

    words = ["great", "awful", "fine film", "boring and long", "a delight"]
    private = [
        Record(f"{words[i % 5]} {i}", f"user-{i % users}" if users else f"record-{i}",
               "positive" if i % 2 else "negative")
        for i in range(24)
    ]  # fmt: skip
    public = [Record(f"{words[i % 5]} public {i}", f"p{i}") for i in range(8)]
    ledger = _ledger(tmp_path)
    cfg = PromptPateConfig(teachers=4, threshold=0, sigma_threshold=1, sigma=2, epsilon=50,
                           student_candidates=2, holdout=1, queries=6,
                           teacher_votes="labels")  # fmt: skip
    res = run_prompt_pate("tiny", PateExamples(get_task("sst2"), private, public),
                          tmp_path / "st", cfg, ledger=ledger, progress=False)  # fmt: skip
    got = _recorded(ledger, res.delta)
    assert ledger.count() == 6
    assert res.epsilon == pytest.approx(got.epsilon, rel=1e-9)
    assert got.relation.noun == ("user" if users else "record") == res.unit


def test_a_pate_holdout_of_zero_is_refused_before_any_charge():
    from privlm.errors import PrivlmError
    from privlm.prompting.config import PromptPateConfig

    with pytest.raises(PrivlmError, match="holdout"):
        PromptPateConfig(holdout=0)  # the student could never be picked, after the labels
