"""SubMix end to end on the tiny ensemble: per-part budgets, STOP, public fallback."""

from __future__ import annotations

from privlm.predict.submix import STOP_FLAG, SubMix, SubMixConfig, part_ledgers


def test_generation_charges_every_part_then_stops_to_public(engine, tmp_path):
    eng, tok = engine  # 4 adapters = 2 parts of two halves
    cfg = SubMixConfig(epsilon=0.01, alpha=2.0, beta=0.01)  # runs out within 40 tokens
    ledgers = part_ledgers(tmp_path / "s.db", "dep", 2, cfg)
    sm = SubMix(eng, tok, ledgers, cfg, seed=0)
    gen = sm.generate("Hello", max_new_tokens=40)
    private, public = gen.extra["private_tokens"], gen.extra["public_tokens"]
    assert private + public == len(gen.token_ids)
    assert all(lg.count() == private for lg in ledgers)
    assert all(lg.spent().epsilon < cfg.epsilon for lg in ledgers)
    assert private > 0 and public > 0
    # the budget ran out: STOP was issued, durably, and the caller told
    assert gen.stopped.startswith("STOP")
    assert ledgers[0].flag(STOP_FLAG)
    # tokens after STOP came from the public model: the tail is all public
    again = SubMix(eng, tok, part_ledgers(tmp_path / "s.db", "dep", 2, cfg), cfg, seed=1)
    later = again.generate("Hi", max_new_tokens=3)
    assert later.extra["private_tokens"] == 0 and later.stopped
    assert all(lg.count() == private for lg in ledgers)


def test_large_budget_answers_privately(engine, tmp_path):
    eng, tok = engine
    cfg = SubMixConfig(epsilon=100.0, alpha=2.0, beta=0.5)
    sm = SubMix(eng, tok, part_ledgers(tmp_path / "s.db", "big", 2, cfg), cfg, seed=0)
    gen = sm.generate("Hello", max_new_tokens=4)
    assert gen.extra["public_tokens"] == 0 and gen.stopped is None


def test_ledger_records_no_data_dependent_parameters(engine, tmp_path):
    eng, tok = engine
    cfg = SubMixConfig(epsilon=100.0, alpha=2.0, beta=0.5)
    ledgers = part_ledgers(tmp_path / "s.db", "p", 2, cfg)
    SubMix(eng, tok, ledgers, cfg, seed=0).generate("Hello", max_new_tokens=2)
    for record in ledgers[0].charges():
        assert record.params == {"alpha": 2.0, "beta": 0.5, "relation": "part"}
