"""The dataset's budget belongs to the library: a predictor built with ``budget=`` reserves
its whole lifetime on the dataset's ledger first (as the service does for a deployment),
once per deployment name, and charges its tokens to ``deployment-<name>`` beside it."""

from __future__ import annotations

import pytest

from privlm.accounting import Budget, Charge, PrivacyLedger, Relation
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.config import PMixEDConfig, SubMixConfig
from privlm.predict.factory import RESERVATION, build_predictor
from privlm.predict.loading import LoadedEnsemble
from privlm.training.manifest import EnsembleManifest


def loaded(engine, protocol="pmixed") -> LoadedEnsemble:
    from privlm.models import load_public_model

    eng, _ = engine
    manifest = EnsembleManifest(
        model="tiny", protocol=protocol, n_parts=eng.n_adapters, partition_key="0",
        privacy_unit="record", units=10, training={},
        partition=[f"a{i}" for i in range(eng.n_adapters)],
    )  # fmt: skip
    return LoadedEnsemble(load_public_model("tiny"), eng, manifest)


def test_a_predictor_over_the_dataset_budget_reserves_its_lifetime_once(engine, tmp_path):
    budget = PrivacyLedger(tmp_path / "l.db", "notes", Budget(20.0, 1e-5))
    budget.charge(
        Charge("dpsgd", epsilon=1.0, relation=Relation.RECORD)
    )  # a DP-SGD run on the same records
    cfg = PMixEDConfig(queries=8, sample_rate=1.0)
    pm = build_predictor(cfg, loaded(engine), budget=budget, name="demo")
    reserved = [c for c in budget.charges() if c.mechanism == RESERVATION]
    assert len(reserved) == 1 and reserved[0].params["deployment"] == "demo"
    assert pm.ledger.name == "deployment-demo" and pm.ledger.count() == 0
    pm.generate("Hello", max_new_tokens=3)
    assert pm.ledger.count() == 3 and budget.count() == 2  # tokens beside, not twice
    build_predictor(cfg, loaded(engine), budget=budget, name="demo")  # reopened: once
    assert budget.count() == 2
    with pytest.raises(PrivlmError, match="other settings"):
        build_predictor(PMixEDConfig(queries=9, sample_rate=1.0), loaded(engine),
                        budget=budget, name="demo")  # fmt: skip
    with pytest.raises(PrivlmError, match="not both"):
        build_predictor(cfg, loaded(engine), budget=budget, ledger=tmp_path / "x.db")


def test_a_reservation_that_does_not_fit_is_refused_before_any_token(engine, tmp_path):
    budget = PrivacyLedger(tmp_path / "l.db", "notes", Budget(8.0, 1e-5))
    budget.charge(Charge("dpsgd", epsilon=3.0, relation=Relation.RECORD))
    with pytest.raises(BudgetExceededError):
        build_predictor(PMixEDConfig(queries=8), loaded(engine), budget=budget, name="big")
    assert budget.count() == 1
    assert "deployment-big" not in {r for r in _ledger_names(tmp_path / "l.db")}


def test_submix_reserves_its_per_part_figure_beside_the_per_unit_one(engine, tmp_path):
    budget = PrivacyLedger(tmp_path / "l.db", "notes", Budget(20.0, 1e-5))
    build_predictor(SubMixConfig(), loaded(engine, "submix"), budget=budget, name="sm")
    assert budget.count() == 0  # never composed into the per-unit figure
    beside = PrivacyLedger(tmp_path / "l.db", "notes/per-part")
    assert beside.relation() is Relation.PART and beside.count() == 1


def _ledger_names(path) -> list[str]:
    from sqlalchemy import create_engine, text

    with create_engine(f"sqlite:///{path}").connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT name FROM privlm_ledgers"))]
