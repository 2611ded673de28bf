"""PMixED end to end on the tiny ensemble: budget, charge-before-release, refusals."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import pmixed as analysis
from privlm.accounting.relations import Relation
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.pmixed import PMixED, PMixEDConfig, rdp_budget_for
from privlm.predict.sampling import UnsupportedSamplingError


def make(engine, tmp_path, **cfg):
    eng, tok = engine
    config = PMixEDConfig(
        **{"epsilon": 8.0, "delta": 1e-5, "alpha": 3, "queries": 12, "sample_rate": 0.5, **cfg}
    )
    ledger = PrivacyLedger(tmp_path / "l.db", "deploy", Budget(config.epsilon, config.delta))
    return PMixED(eng, tok, ledger, config, seed=0), ledger


@pytest.mark.fast
def test_rdp_budget_round_trips_through_theorem_c3():
    from privlm.accounting import balle_epsilon

    rdp = rdp_budget_for(8.0, 1e-5, 3)
    assert balle_epsilon([3.0], [rdp], 1e-5).epsilon == pytest.approx(8.0, rel=1e-12)


def test_every_token_is_charged_and_t_queries_spend_at_most_the_budget(engine, tmp_path):
    pm, ledger = make(engine, tmp_path)
    gen = pm.generate("Hello", max_new_tokens=5)
    assert len(gen.token_ids) == ledger.count() <= 5
    assert pm.query_curve.at([3.0])[0] <= pm.config.per_query_rdp
    more = pm.generate("again", max_new_tokens=50)
    assert ledger.count() == 12 and pm.queries_left() == 0
    assert more.stopped and "T=12" in more.stopped
    assert ledger.spent().epsilon <= 8.0
    with pytest.raises(BudgetExceededError, match="all T=12 private queries"):
        pm.generate("one more", max_new_tokens=1)
    assert ledger.count() == 12


def test_a_refused_charge_releases_nothing(engine, tmp_path, monkeypatch):
    pm, ledger = make(engine, tmp_path)

    def refuse(charge):
        raise BudgetExceededError("refused: test")

    monkeypatch.setattr(ledger, "charge", refuse)
    gen = pm.generate("Hello", max_new_tokens=3)
    assert gen.token_ids == [] and gen.text == "" and "refused" in gen.stopped


@pytest.mark.parametrize(
    "option",
    [{"greedy": True}, {"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.9}, {"num_beams": 2}],
)
def test_non_ancestral_sampling_is_refused_with_a_reason(engine, tmp_path, option):
    pm, ledger = make(engine, tmp_path)
    with pytest.raises(UnsupportedSamplingError, match="refused"):
        pm.generate("Hello", max_new_tokens=2, **option)
    assert ledger.count() == 0


def test_radius_is_the_largest_that_fits_the_per_query_budget(engine, tmp_path):
    pm, _ = make(engine, tmp_path)
    n, cfg = 4, pm.config
    assert analysis.query_rdp(pm.radius, 3, n, cfg.sample_rate) <= cfg.per_query_rdp
    assert analysis.query_rdp(pm.radius * 1.001, 3, n, cfg.sample_rate) > cfg.per_query_rdp


def test_scoring_charges_one_query_per_position(engine, tmp_path):
    pm, ledger = make(engine, tmp_path)
    scores = pm.score([1, 2, 3, 4, 5])
    assert scores.log_probs.shape == (4,) and (scores.log_probs <= 0).all()
    assert scores.private == 4
    assert ledger.count() == 4
    with pytest.raises(BudgetExceededError, match="needs 10 queries"):
        pm.score(list(range(11)))


def test_ledger_must_match_the_configuration(engine, tmp_path):
    eng, tok = engine
    ledger = PrivacyLedger(tmp_path / "x.db", "d", Budget(3.0, 1e-5))
    with pytest.raises(PrivlmError, match=r"not ε=8\.0"):
        PMixED(eng, tok, ledger, PMixEDConfig())


def test_every_step_mixes_every_member_given_the_full_context(engine, tmp_path, monkeypatch):
    """Every member's row is evaluated at every step (the subset is secret: the work may not
    depend on it), and each step mixes exactly the distributions a full recomputation of the
    context gives, with the Poisson mask drawn for that step."""
    import torch

    from privlm.predict import pmixed as module

    pm, _ = make(engine, tmp_path, sample_rate=0.4, queries=50)
    seen = []
    real = module.pmixed_mixture

    def record(members_lp, public, alpha, radius, members, **options):
        seen.append((members_lp.clone(), public.clone(), members.clone()))
        return real(members_lp, public, alpha, radius, members, **options)

    monkeypatch.setattr(module, "pmixed_mixture", record)
    gen = pm.generate("Hello there", max_new_tokens=8)
    eng, tok = engine
    context = tok("Hello there", add_special_tokens=False)["input_ids"]
    for t, (members_lp, public, members) in enumerate(seen):
        full = eng.log_probs(context, [-1, *range(eng.n_adapters)])
        assert torch.allclose(public, full[0], atol=1e-5)
        assert torch.allclose(members_lp, full[1:], atol=1e-5)
        assert members.dtype == torch.bool and members.shape == (eng.n_adapters,)
        if t < len(gen.token_ids):
            context = [*context, gen.token_ids[t]]
    assert len(seen) == len(gen.token_ids)


def _legacy_ledger(tmp_path, cfg: PMixEDConfig, n_models: int, tokens: int) -> PrivacyLedger:
    """A ledger as a deployment under the per-part (expansion) bound left it: tokens charged
    at the expansion radius, with the expansion curve, and no bound recorded."""
    from privlm.accounting import Charge, RdpCurve

    ledger = PrivacyLedger(tmp_path / "legacy.db", "old", Budget(cfg.epsilon, cfg.delta))
    radius = analysis.solve_radius(
        cfg.per_query_rdp, cfg.alpha, n_models, cfg.sample_rate, bound="expansion"
    )
    curve = RdpCurve.from_mapping(
        analysis.query_rdp_curve(radius, cfg.alpha, n_models, cfg.sample_rate, "expansion")
    )
    for i in range(tokens):
        ledger.charge(
            Charge(
                "pmixed",
                rdp=curve,
                params={"query": i + 1, "radius": radius, "q": cfg.sample_rate},
                relation=Relation.RECORD,
            )
        )
    return ledger


def test_tokens_released_under_the_per_part_bound_are_restated_per_unit(engine, tmp_path):
    eng, tok = engine
    cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=12, sample_rate=0.03)
    ledger = _legacy_ledger(tmp_path, cfg, eng.n_adapters, tokens=2)
    fresh = cfg.query_cost(eng.n_adapters)[0]
    pm = PMixED(eng, tok, ledger, cfg, seed=0)
    restated = [c for c in ledger.charges() if c.mechanism == "pmixed-per-unit-restatement"]
    assert len(restated) == 1 and restated[0].params["queries_restated"] == 2
    assert pm.refusal is None and pm.radius < fresh and pm.queries_left() == 10
    pm.generate("Hello", max_new_tokens=50)  # the rest of the budget, per unit
    assert pm.queries_left() == 0 and ledger.spent().epsilon <= 8.0 * (1 + 1e-9)
    sound = sum(
        analysis.query_rdp(float(c.params["radius"]), 3, eng.n_adapters, 0.03)
        for c in ledger.charges()
        if c.mechanism == "pmixed"
    )
    assert sound <= rdp_budget_for(8.0, 1e-5, 3) * (1 + 1e-9)
    again = PMixED(eng, tok, ledger, cfg, seed=0)  # restated once, not twice
    assert sum(c.mechanism == "pmixed-per-unit-restatement" for c in ledger.charges()) == 1
    assert again.exhausted()


def test_a_deployment_that_overspent_per_unit_refuses_with_the_reason(engine, tmp_path):
    # q = 0.3: at q = 0.03 and N ≤ 4 the per-unit bound's floor (the empty subset answers
    # p₀ with probability ≥ 0.88) makes the per-unit charge smaller than the per-part one
    eng, tok = engine
    cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=12, sample_rate=0.3)
    ledger = _legacy_ledger(tmp_path, cfg, eng.n_adapters, tokens=12)
    charges = ledger.count()
    pm = PMixED(eng, tok, ledger, cfg, seed=0)
    assert pm.exhausted() and "per unit" in (pm.refusal or "")
    with pytest.raises(BudgetExceededError, match="one member replaced"):
        pm.generate("Hello", max_new_tokens=1)
    # the restatement is recorded all the same (the tokens were released): an overdraft
    assert ledger.count() == charges + 1 and ledger.spent().epsilon > cfg.epsilon
    assert "per-part bound" in (ledger.overdrawn() or "")
    restated = sum(
        analysis.query_rdp(float(c.params["radius"]), 3, eng.n_adapters, 0.3)
        for c in ledger.charges()
        if c.mechanism == "pmixed"
    )
    assert ledger.recorded_rdp(ledger.charges(), [3.0])[0] == pytest.approx(restated)
    PMixED(eng, tok, ledger, cfg, seed=0)  # reopened: restated once, not twice
    assert ledger.count() == charges + 1


def test_legacy_tokens_are_restated_at_the_order_they_were_released(engine, tmp_path):
    """α was not recorded with legacy tokens; restating them at the deployment's present α
    could be up to 26 % low. Their curves cover exactly the orders 2..α they were released
    at, so that α is read off them, and an order their bound does not cover stays ∞."""
    from privlm.predict.pmixed import per_unit_rdp, released_alpha

    eng, tok = engine
    old_cfg = PMixEDConfig(
        epsilon=16.0, delta=1e-5, alpha=2, queries=12, sample_rate=0.03
    )  # released at α = 2
    ledger = _legacy_ledger(tmp_path, old_cfg, eng.n_adapters, tokens=3)
    records = [r for r in ledger.charges() if r.mechanism == "pmixed"]
    assert {released_alpha(r, ledger.orders) for r in records} == {2}
    restated = per_unit_rdp(records, ledger, eng.n_adapters)
    at = dict(zip(ledger.orders, restated, strict=True))
    radius = float(records[0].params["radius"])
    assert at[2.0] == pytest.approx(3 * analysis.query_rdp(radius, 2, eng.n_adapters, 0.03))
    assert at[3.0] == float("inf")
    pm = PMixED(
        eng,
        tok,
        ledger,
        PMixEDConfig(epsilon=16.0, delta=1e-5, alpha=3, queries=12, sample_rate=0.03),
        seed=0,
    )
    assert pm.exhausted() and "per-unit budget" in (pm.refusal or "")  # nothing bounds α = 3


def test_every_token_charge_records_its_order_and_ensemble_size(engine, tmp_path):
    pm, ledger = make(engine, tmp_path)
    pm.generate("Hello", max_new_tokens=2)
    eng, _ = engine
    for c in ledger.charges():
        assert c.params["alpha"] == 3 and c.params["members"] == eng.n_adapters


def test_the_budget_says_tokens_left_and_why_epsilon_grows_fast_at_first(engine, tmp_path):
    """The figures beside a partly spent budget are the ledger's own: ε after one token is
    the one-token curve's conversion, and the line names the tokens left."""
    from privlm.predict.spending import budget_line

    pm, ledger = make(engine, tmp_path, queries=64)
    pm.generate("Hello", max_new_tokens=1)
    b = pm.budget()
    assert b["growth"]["first_token_epsilon"] == pytest.approx(ledger.spent().epsilon)
    assert b["growth"]["first_token_epsilon"] > 0.5 * pm.config.epsilon  # the fixed cost
    # all T tokens together spend at most the budget, so each later one adds the rest / (T-1)
    later = (pm.config.epsilon - ledger.spent().epsilon) / 63
    assert b["growth"]["later_token_epsilon"] == pytest.approx(later)
    line = budget_line(b)
    assert "63 of T=64 private tokens left" in line and "grows fast at first" in line
    assert f"{ledger.spent().epsilon:.4g} of 8" in line


def test_submix_budget_line_states_its_figure_what_is_left_and_its_dp_conversion():
    from privlm.accounting import RdpCurve
    from privlm.predict.spending import budget_line

    whole = RdpCurve.from_mapping({2.0: 2.0}).to_dp(1e-5).epsilon
    used = RdpCurve.from_mapping({2.0: 0.5}).to_dp(1e-5).epsilon
    line = budget_line({
        "budget": {"rdp_epsilon": 2.0, "order": 2.0, "as_dp": {"epsilon": whole, "delta": 1e-5}},
        "spent": {"rdp_epsilon": 0.5, "order": 2.0, "as_dp": {"epsilon": used, "delta": 1e-5}},
    })  # fmt: skip
    assert line.startswith("RDP ε spent 0.5 of 2 at order α=2 per part")
    assert f"as (ε, δ): {used:.4g} of {whole:.4g} at δ=1e-05" in line
    assert "RDP ε 1.5 left" in line and "not a per-unit guarantee" in line
