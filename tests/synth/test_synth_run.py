"""``privlm synth`` end to end on the tiny model: what leaves, what is charged and when,
refusal, resume (docs/sharp_edges.md, "DP synthetic text", steps 4 to 6)."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest

from privlm.accounting import Budget, PrivacyLedger
from privlm.data.records import Dataset, Record
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.config import rdp_budget_for
from privlm.synth import SynthConfig, synthesize
from privlm.synth.config import ALPHA_GRID
from privlm.synth.run import run_folder, statement_path

CFG = dict(count=4, max_tokens=4, members=3, prompt_tokens=24, seed=7)
LABELS = ["neg", "pos"]


def data(n: int = 24, drop: int | None = None) -> Dataset:
    recs = [
        Record(
            f"the film {i} was {'fine' if i % 2 else 'dull'}", f"r{i}", "pos" if i % 2 else "neg"
        )
        for i in range(n)
    ]
    if drop is not None:
        recs.pop(drop)
    return Dataset(recs, "mem")


def run(tiny, tmp_path, ds, name="a", ledger=None, **kw):
    out = tmp_path / name / "synth.jsonl"
    out.parent.mkdir(exist_ok=True)
    res = synthesize(
        tiny, ds, out, SynthConfig(**{**CFG, **kw}), labels=LABELS, ledger=ledger, progress=False
    )
    return out, res


def test_the_released_files_are_the_same_on_neighbouring_datasets_but_the_texts(tiny, tmp_path):
    out_a, res_a = run(tiny, tmp_path, data(), "a")
    out_b, res_b = run(tiny, tmp_path, data(drop=3), "b")
    released_a = sorted(p.name for p in out_a.parent.iterdir() if not p.name.startswith("."))
    released_b = sorted(p.name for p in out_b.parent.iterdir() if not p.name.startswith("."))
    assert released_a == released_b == ["synth.jsonl", "synth.jsonl.privacy.json"]
    assert statement_path(out_a).read_bytes() == statement_path(out_b).read_bytes()
    st = json.loads(statement_path(out_a).read_text())
    assert st["texts"] == 4 and "units" not in json.dumps(st)
    rows = [json.loads(x) for x in out_a.read_text().splitlines()]
    assert [r["label"] for r in rows] == ["neg", "neg", "pos", "pos"]  # per declared label
    assert all(set(r) == {"text", "label"} for r in rows)
    # the exact counts are the curator's, and differ
    assert res_a.curator["records"] == 24 and res_b.curator["records"] == 23
    assert stat.S_IMODE(run_folder(out_a).stat().st_mode) == 0o700


def test_the_run_is_charged_once_before_any_text_and_resume_does_not_pay_again(tiny, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(20.0, 1e-5))
    out, _res = run(tiny, tmp_path, data(), ledger=ledger)
    assert ledger.count() == 1 and abs(ledger.spent().epsilon - 8.0) < 1e-6
    again = synthesize(tiny, data(), out, SynthConfig(**CFG), labels=LABELS, ledger=ledger,
                       resume=True, progress=False)  # fmt: skip
    assert ledger.count() == 1 and again.written == 4
    assert len(out.read_text().splitlines()) == 4
    with pytest.raises(PrivlmError, match="resume"):  # a rerun without --resume pays again
        synthesize(
            tiny, data(), out, SynthConfig(**CFG), labels=LABELS, ledger=ledger, progress=False
        )
    with pytest.raises(PrivlmError, match="other settings"):
        synthesize(tiny, data(), out, SynthConfig(**{**CFG, "members": 2}), labels=LABELS,
                   ledger=ledger, resume=True, progress=False)  # fmt: skip


def test_a_run_over_the_budget_is_refused_before_any_file(tiny, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(5.0, 1e-5))
    with pytest.raises(BudgetExceededError, match="synth run"):
        run(tiny, tmp_path, data(), ledger=ledger)
    assert ledger.count() == 0
    assert not any(p for p in (tmp_path / "a").iterdir())


def test_labelled_data_needs_declared_labels(tiny, tmp_path):
    with pytest.raises(PrivlmError, match="--labels"):
        synthesize(tiny, data(), tmp_path / "x.jsonl", SynthConfig(**CFG), progress=False)


@pytest.mark.parametrize(
    ("labels", "unlabelled", "why"),
    [(["neg", "neg"], False, "given once"), (["neg", "pos", "meh"], False, "no record has"),
     (["neg", ""], False, "empty"), (["neg", "pos"], True, "the data has none")],
)  # fmt: skip
def test_a_label_set_that_does_not_fit_the_data_is_refused_before_any_charge(
    tiny, tmp_path, labels, unlabelled, why
):
    ds = data()
    if unlabelled:
        ds = Dataset([Record(r.text, r.unit, None) for r in ds.records], "t", "record")
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(50.0, 1e-5))
    with pytest.raises(PrivlmError, match=why):
        synthesize(tiny, ds, tmp_path / "x.jsonl", SynthConfig(**CFG), labels=labels,
                   ledger=ledger, progress=False)  # fmt: skip
    assert ledger.count() == 0 and not (tmp_path / "x.jsonl").exists()


def test_an_interrupted_text_is_lost_not_redrawn(tiny, tmp_path, monkeypatch):
    from privlm.predict.pmixed import PMixEDSequence

    original = PMixEDSequence.choose

    def die_after_text_1s_first_token(self, log_probs):
        token = original(self, log_probs)  # charged to text-1's ledger, then the run dies
        if self.predictor.ledger.name == "text-1":
            raise KeyboardInterrupt
        return token

    monkeypatch.setattr(PMixEDSequence, "choose", die_after_text_1s_first_token)
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(20.0, 1e-5))
    with pytest.raises(KeyboardInterrupt):
        run(tiny, tmp_path, data(), ledger=ledger)
    monkeypatch.setattr(PMixEDSequence, "choose", original)
    out = tmp_path / "a" / "synth.jsonl"
    assert len(out.read_text().splitlines()) == 1
    res = synthesize(tiny, data(), out, SynthConfig(**CFG), labels=LABELS, ledger=ledger,
                     resume=True, progress=False)  # fmt: skip
    assert (res.written, res.lost) == (3, 1) and ledger.count() == 1
    assert len(out.read_text().splitlines()) == 3
    assert PrivacyLedger(run_folder(out) / "texts.db", "text-1").count() == 1  # not redrawn


def test_each_token_is_charged_to_its_texts_ledger(tiny, tmp_path):
    out, _ = run(tiny, tmp_path, data())
    texts = run_folder(out) / "texts.db"
    for i in range(4):
        led = PrivacyLedger(texts, f"text-{i}")
        assert 1 <= led.count() <= CFG["max_tokens"]
        assert led.spent().epsilon <= 8.0 + 1e-9


def test_a_dclip_run_is_charged_its_budget_and_each_token_before_it_leaves(tiny, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(3.0, 1e-5))
    out, res = run(tiny, tmp_path, data(), ledger=ledger, mechanism="dclip", epsilon=3.0, top_k=20)
    assert ledger.count() == 1 and abs(ledger.spent().epsilon - 3.0) < 1e-6
    assert res.statement["clip"] > 0 and res.statement["top_k"] == 20
    assert "radius" not in res.statement
    for i in range(4):
        led = PrivacyLedger(run_folder(out) / "texts.db", f"text-{i}")
        assert 1 <= led.count() <= CFG["max_tokens"]
        assert led.spent().epsilon <= 3.0 + 1e-9


def test_a_screened_run_charges_its_paid_tokens_and_instances_within_one_texts_curve(
    tiny, tmp_path
):
    """Each text's ledger holds its sparse-vector instances and paid tokens, never more than
    the text's charged curve (c instances and c paid queries) at any order; the neighbouring
    run releases the same statement."""
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(8.0, 1e-5))
    kw = dict(mechanism="screened", paid_tokens=2, threshold=0.0)
    out, res = run(tiny, tmp_path, data(), ledger=ledger, **kw)
    cfg = SynthConfig(**{**CFG, **kw})
    assert ledger.count() == 1 and ledger.spent().epsilon <= 8.0 + 1e-9
    assert res.statement["paid_tokens"] == 2 and res.statement["threshold"] == 0.0
    assert res.written == 4
    curve = cfg.text_curve()
    paid_seen = 0
    for i in range(4):
        led = PrivacyLedger(run_folder(out) / "texts.db", f"text-{i}")
        kinds = [c.mechanism for c in led.charges()]
        paid_seen += kinds.count("screened-pmixed")
        assert kinds.count("screened-pmixed") <= 2 and set(kinds) <= {
            "screened-pmixed", "screened-pmixed-instance"
        }  # fmt: skip
        total = np.sum([c.rdp for c in led.charges()], axis=0)  # at the ledger's orders
        bound = curve.at(led.orders)
        finite = np.isfinite(bound)
        assert finite.any() and np.all(total[finite] <= bound[finite] * (1 + 1e-9))
    assert paid_seen >= 1  # at τ = 0 the members' tokens are paid: the check is not vacuous
    out_b, _ = run(tiny, tmp_path, data(drop=3), "b", **kw)
    assert statement_path(out).read_bytes() == statement_path(out_b).read_bytes()


def test_screened_synth_picks_the_order_and_paid_tokens_from_public_settings():
    cfg = SynthConfig(epsilon=8.0, max_tokens=64, members=16, mechanism="screened")
    assert cfg.paid == 16 and cfg.order in range(2, 33)
    usable = [a for a in ALPHA_GRID if rdp_budget_for(8.0, 1e-5, a) > 0]
    assert cfg.radius == max(cfg.screened_config(a).query_cost(16)[0] for a in usable) > 0
    lifetime = cfg.text_curve()
    assert lifetime.at([float(cfg.order)])[0] <= rdp_budget_for(8.0, 1e-5, cfg.order) * (1 + 1e-9)
    assert SynthConfig(max_tokens=3, mechanism="screened", paid_tokens=9).paid == 3


def test_auto_count_charges_its_gaussian_with_the_run_and_never_redraws(tiny, tmp_path):
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(8.0, 1e-5))
    cfg = {**CFG, "auto_count": True, "members": 2}
    out, res = run(tiny, tmp_path, data(40), ledger=ledger, **cfg)
    assert [c.mechanism for c in ledger.charges()] == ["synth", "synth-count"]
    assert ledger.spent().epsilon <= 8.0
    texts = res.statement["count"]["texts_per_label"]
    assert res.statement["texts"] == sum(texts) == res.written
    assert len(out.read_text().splitlines()) == sum(texts)
    again = synthesize(tiny, data(40), out, SynthConfig(**cfg), labels=LABELS, ledger=ledger,
                       resume=True, progress=False)  # fmt: skip
    assert again.statement == res.statement and ledger.count() == 2


def test_auto_counts_noise_is_the_gaussian_mechanism_it_charges():
    """σ from the count's share of (ε, δ/2), checked by dp-accounting's own RDP of the
    Gaussian mechanism at sensitivity 1 (a record) and √labels (a user)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    from privlm.synth.config import plan_count

    for labels, users in ((2, False), (3, True)):
        plan = plan_count(SynthConfig(epsilon=4.0, auto_count=True), labels, users)
        orders = [2.0, 4.0, 8.0, 32.0]
        acc = RdpAccountant(orders)
        acc.compose(dp_accounting.GaussianDpEvent(plan.sigma / plan.sensitivity))
        theirs = acc._rdp
        ours = plan.curve().at(orders)
        assert np.allclose(ours, theirs, rtol=1e-9)
        assert plan.generation.epsilon == pytest.approx(3.6) and plan.generation.delta == 5e-6
