"""Screened PMixED end to end on the tiny ensemble: the test's noise and comparison, charges
before release, the durable instance state across restarts and processes, and what happens
once the paid tokens are spent. The accounting is checked exactly in
tests/accounting/test_sparse_vector.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import sparse_vector as sv
from privlm.accounting.ledger import LedgerTransaction
from privlm.accounting.relations import Relation
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict import screened
from privlm.predict.config import ScreenedPMixEDConfig, rdp_budget_for
from privlm.predict.screened import INSTANCE, PAID, STATE_FLAG, ScreenedPMixED, tv_score


def make(engine, path, seed=0, **cfg):
    eng, tok = engine
    config = ScreenedPMixEDConfig(
        **{
            "epsilon": 8.0,
            "delta": 1e-5,
            "alpha": 3,
            "paid_tokens": 3,
            "sample_rate": 0.5,
            "threshold": 0.2,
            **cfg,
        }
    )
    ledger = PrivacyLedger(path / "l.db", "deploy", Budget(config.epsilon, config.delta))
    return ScreenedPMixED(eng, tok, ledger, config, seed=seed), ledger


def force_noise(monkeypatch, predictor, threshold_noise=0.0, query_noise=0.0):
    """Replace the Laplace draws (recording their scales): the test's decisions become the
    noiseless comparison of the score with τ + ``threshold_noise``."""
    scales = []

    def laplace(scale, size=()):
        scales.append(scale)
        is_threshold = scale == predictor.test.threshold_scale
        return np.float64(threshold_noise if is_threshold else query_noise)

    monkeypatch.setattr(predictor.rng, "laplace", laplace)
    return scales


def kinds(ledger):
    return [c.mechanism for c in ledger.charges()]


@pytest.mark.fast
def test_the_score_is_the_accounting_modules_tv_distance():
    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(5, 11, generator=g, dtype=torch.float64), -1)
    p = lp.exp().numpy()
    assert tv_score(lp) == pytest.approx(float(sv.screening_score(p[1:], p[0])), abs=1e-15)


@pytest.mark.fast
def test_the_budget_splits_into_c_instances_and_c_paid_queries():
    cfg = ScreenedPMixEDConfig(paid_tokens=64, svt_share=0.3)
    eps_instance, per_query = cfg.split()
    budget = rdp_budget_for(cfg.epsilon, cfg.delta, cfg.alpha)
    assert cfg.instance_curve().at([3.0])[0] == pytest.approx(0.3 * budget / 64, rel=1e-9)
    assert cfg.query_cost(80)[1].at([3.0])[0] <= per_query * (1 + 1e-9)
    assert cfg.lifetime_curve(80).at([3.0])[0] <= budget * (1 + 1e-9)
    assert cfg.lifetime_curve(80).to_dp(cfg.delta).epsilon <= cfg.epsilon + 1e-9
    assert cfg.screen(80).query_scale == pytest.approx(4 / (80 * eps_instance))


def test_the_noise_scales_and_the_comparison_are_above_thresholds(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=0.0)
    scales = force_noise(monkeypatch, pm, threshold_noise=0.0, query_noise=0.0)
    gen = pm.generate("Hello", max_new_tokens=1)  # score ≥ 0 = τ + ρ: above, paid
    assert gen.extra["paid_tokens"] == 1 and gen.extra["free_tokens"] == 0
    assert scales[:2] == [pm.test.threshold_scale, pm.test.query_scale]
    assert pm.test.threshold_scale == pytest.approx(2 * pm.test.sensitivity / pm.test.epsilon)
    assert pm.test.sensitivity == pytest.approx(1 / pm.engine.n_adapters)
    # instance 1, its paid query, and instance 2 opened after the ⊤, in this order
    assert kinds(ledger) == [INSTANCE, PAID, INSTANCE]


def test_below_the_threshold_tokens_are_free_and_charge_nothing(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=1.0)
    force_noise(monkeypatch, pm)
    gen = pm.generate("Hello", max_new_tokens=6)
    assert len(gen.token_ids) == 6 and gen.extra["free_tokens"] == 6
    assert kinds(ledger) == [INSTANCE]  # one open instance covers every ⊥
    assert pm.queries_used() == 0 and not pm.exhausted()


def test_paid_tokens_are_charged_before_release_and_stop_at_c(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=0.0, when_spent="refuse")
    force_noise(monkeypatch, pm)
    released = []
    for token in pm.stream(pm.prompt_ids("Hello"), 10):
        released.append(token)
        assert kinds(ledger).count(PAID) == sum(not t.free for t in released)
    assert len(released) == 3 and all(t.private and not t.free for t in released)
    assert kinds(ledger) == [INSTANCE, PAID] * 3  # no instance opens after the c-th ⊤
    assert ledger.spent().epsilon <= 8.0
    assert pm.exhausted()
    with pytest.raises(BudgetExceededError, match="when_spent=refuse"):
        pm.generate("again", max_new_tokens=1)


def test_once_spent_the_public_model_answers_when_configured(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=0.0, paid_tokens=1, when_spent="public")
    force_noise(monkeypatch, pm)
    gen = pm.generate("Hello", max_new_tokens=4)
    assert len(gen.token_ids) == 4 and gen.extra["paid_tokens"] == 1
    assert ledger.count() == 2 and not gen.stopped
    scores = pm.score(pm.prompt_ids("one two three four"))
    assert scores.private == 0 and ledger.count() == 2


def test_the_threshold_noise_survives_a_restart_and_is_never_redrawn_free(
    engine, tmp_path, monkeypatch
):  # fmt: skip
    pm, ledger = make(engine, tmp_path, threshold=0.5)
    pm.generate("Hello", max_new_tokens=3)
    state = json.loads(ledger.flag(STATE_FLAG))
    opened = kinds(ledger).count(INSTANCE)
    again, _ = make(engine, tmp_path, seed=1, threshold=0.5)  # a restart: a new process
    assert again.state.threshold_noise == state["threshold_noise"]
    scales = []
    monkeypatch.setattr(again.rng, "laplace", lambda s, size=(): scales.append(s) or np.float64(-9))
    again.generate("more", max_new_tokens=2)  # noise −9: below, free; the same instance
    assert again.test.threshold_scale not in scales
    assert kinds(ledger).count(INSTANCE) == opened
    assert json.loads(ledger.flag(STATE_FLAG))["threshold_noise"] == state["threshold_noise"]


def test_an_instance_answers_only_under_the_settings_that_fixed_its_noise(
    engine, tmp_path, monkeypatch
):  # fmt: skip
    """The audit's case: an instance opened with c = 3 (ε′ larger), resumed by a deployment
    restarted with c = 24 (ε′ 8× smaller, query noise 8× wider) would compare scores noised
    at one scale with a threshold noised at another; its charge covered only the first. Now
    the open instance is closed (its charge stands) and a fresh one opens, charged, with a
    fresh threshold noise at the new scale."""
    pm, ledger = make(engine, tmp_path, threshold=0.5)
    force_noise(monkeypatch, pm, threshold_noise=0.25, query_noise=-9.0)  # below: free
    pm.generate("Hello", max_new_tokens=2)
    before = json.loads(ledger.flag(STATE_FLAG))
    assert before["instance_epsilon"] == pm.test.epsilon and before["instances"] == 1
    again, _ = make(engine, tmp_path, seed=1, threshold=0.5, paid_tokens=24)
    assert again.test.epsilon < pm.test.epsilon
    scales = force_noise(monkeypatch, again, threshold_noise=0.125, query_noise=-9.0)
    again.generate("more", max_new_tokens=2)
    after = json.loads(ledger.flag(STATE_FLAG))
    assert after["instances"] == 2 and after["instance"] == 2
    assert after["instance_epsilon"] == again.test.epsilon and after["threshold_noise"] == 0.125
    assert again.test.threshold_scale in scales  # drawn anew, at the new scale
    instances = [c for c in ledger.charges() if c.mechanism == INSTANCE]
    assert [c.params["instance_epsilon"] for c in instances] == [
        pm.test.epsilon,
        again.test.epsilon,
    ]
    back, _ = make(engine, tmp_path, seed=2, threshold=0.9, paid_tokens=24)  # τ alone: kept
    force_noise(monkeypatch, back, query_noise=-9.0)
    back.generate("again", max_new_tokens=1)
    assert json.loads(ledger.flag(STATE_FLAG))["instances"] == 2


def test_two_processes_share_one_instance_at_a_time(engine, tmp_path):
    a, ledger = make(engine, tmp_path, seed=1, threshold=0.1, paid_tokens=6)
    b, _ = make(engine, tmp_path, seed=2, threshold=0.1, paid_tokens=6)
    for _ in range(4):
        a.generate("Hello", max_new_tokens=3)
        b.generate("World", max_new_tokens=3)
    records = ledger.charges()
    instances = [r.params["instance"] for r in records if r.mechanism == INSTANCE]
    paid_in = [r.params["instance"] for r in records if r.mechanism == PAID]
    assert instances == list(range(1, len(instances) + 1))  # opened once each, in order
    assert len(set(paid_in)) == len(paid_in)  # each instance halts at its first ⊤
    assert len(instances) - len(paid_in) <= 1


def test_a_paid_query_that_does_not_fit_releases_nothing(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=0.0, when_spent="refuse")
    force_noise(monkeypatch, pm)
    real = LedgerTransaction.charge

    def refuse_paid(self, charge):
        if charge.mechanism == PAID:
            raise BudgetExceededError("refused: test")
        return real(self, charge)

    monkeypatch.setattr(LedgerTransaction, "charge", refuse_paid)
    gen = pm.generate("Hello", max_new_tokens=3)
    assert gen.token_ids == [] and "refused: test" in gen.stopped
    assert kinds(ledger) == [INSTANCE] and pm.exhausted()  # the instance is closed for good


def test_a_crash_inside_the_test_records_nothing(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path, threshold=0.0)

    def crash(scale, size=()):
        raise RuntimeError("power cut")

    monkeypatch.setattr(pm.rng, "laplace", crash)
    with pytest.raises(RuntimeError):
        pm.generate("Hello", max_new_tokens=1)
    assert ledger.count() == 0 and ledger.flag(STATE_FLAG) is None


def test_the_threshold_noise_never_leaves_with_the_ledger(engine, tmp_path):
    pm, ledger = make(engine, tmp_path, threshold=0.5)
    pm.generate("Hello", max_new_tokens=2)
    noise = json.loads(ledger.flag(STATE_FLAG))["threshold_noise"]
    exported = json.dumps(ledger.to_json())
    assert repr(noise) not in exported and STATE_FLAG not in exported
    assert "threshold_noise" not in json.dumps(pm.budget())


def test_a_ledger_with_other_charges_is_refused(engine, tmp_path):
    from privlm.accounting import Charge, RdpCurve

    _, ledger = make(engine, tmp_path)
    ledger.charge(
        Charge(
            "pmixed", rdp=RdpCurve.from_mapping({2.0: 0.01, 3.0: 0.01}), relation=Relation.RECORD
        )
    )
    with pytest.raises(PrivlmError, match="a ledger of its own"):
        make(engine, tmp_path)


def test_scoring_runs_every_position_through_the_screen(engine, tmp_path):
    pm, ledger = make(engine, tmp_path, threshold=0.15, paid_tokens=50)
    ids = pm.prompt_ids("The quick brown fox jumps over the lazy dog")
    scores = pm.score(ids)
    assert scores.log_probs.shape == (len(ids) - 1,) and torch.all(scores.log_probs <= 0)
    assert scores.private == len(ids) - 1
    assert kinds(ledger).count(PAID) == pm.queries_used()


@pytest.mark.fast
def test_the_registry_builds_the_screened_config():
    from privlm.predict.mechanisms import mechanism

    cfg = mechanism("screened").make_config({"epsilon": 6.0, "paid_tokens": 10, "threshold": None})
    assert isinstance(cfg, ScreenedPMixEDConfig)
    assert cfg.paid_tokens == 10 and cfg.epsilon == 6.0
    assert cfg.threshold == ScreenedPMixEDConfig().threshold
    with pytest.raises(PrivlmError, match="beta: not a setting of screened"):
        mechanism("screened").make_config({"beta": 0.1})


@pytest.mark.fast
def test_the_predictor_is_the_analysed_algorithm(monkeypatch):
    """The predictor's test uses the accounting module's instance (its ε′ and Δ = 1/N)."""
    cfg = ScreenedPMixEDConfig(paid_tokens=8)
    assert cfg.screen(4) == sv.AboveThreshold(cfg.split()[0], 0.25)
    assert screened.INSTANCE != screened.PAID
