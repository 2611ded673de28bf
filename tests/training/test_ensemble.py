"""Ensemble training: disjoint parts by unit, PEFT adapters, a manifest without text, resume."""

from __future__ import annotations

import json

import pytest

from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.predict.engine import EnsembleEngine
from privlm.training import ensemble as ens
from privlm.training.lora_finetune import LoraTrainingConfig

CFG = LoraTrainingConfig(epochs=1, block_size=32, batch_size=4, learning_rate=1e-2)


def users_dataset(n_users=8):
    recs = [
        Record(
            f"secret note {u}-{i}: patient {1000 + u} seen about condition {i}.",
            f"user-{u}",
            line=i,
        )
        for u in range(n_users)
        for i in range(5)
    ]
    return Dataset(recs, "mem", "user")


def test_pmixed_ensemble_manifest_and_adapters(tmp_path):
    ds = users_dataset()
    manifest = ens.train_ensemble("tiny", ds, 4, tmp_path, "pmixed", CFG, progress=False)
    names = [p["name"] for p in manifest["partition"]]
    assert names == ["part-000", "part-001", "part-002", "part-003"]
    assert sum(p["units"] for p in manifest["partition"]) == 8
    assert manifest["privacy_unit"] == "user" and manifest["training"]["rank"] == 4
    assert all(manifest["adapters"][n]["status"] == "done" for n in names)
    text = (tmp_path / "manifest.json").read_text()
    assert "secret" not in text and "patient" not in text
    engine = EnsembleEngine.from_directories(
        load_public_model("tiny").model, [tmp_path / n for n in names]
    )
    lp = engine.log_probs([1, 2, 3], [-1, 0, 1])
    assert not lp[0].allclose(lp[1])  # training moved the adapter away from the base


def test_submix_halves(tmp_path):
    manifest = ens.train_ensemble(
        "tiny", users_dataset(), 2, tmp_path, "submix", CFG, progress=False
    )
    assert [p["name"] for p in manifest["partition"]] == [
        "part-000-a",
        "part-000-b",
        "part-001-a",
        "part-001-b",
    ]
    assert all(p["units"] == 2 for p in manifest["partition"])


def test_interrupted_run_resumes_from_finished_adapters(tmp_path, monkeypatch):
    ds = users_dataset()
    real = ens.finetune_lora
    calls = []

    def flaky(model, texts, cfg, out, desc, progress):
        calls.append(desc)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(model, texts, cfg, out, desc, progress)

    monkeypatch.setattr(ens, "finetune_lora", flaky)
    with pytest.raises(KeyboardInterrupt):
        ens.train_ensemble("tiny", ds, 4, tmp_path, "pmixed", CFG, progress=False)
    with pytest.raises(PrivlmError, match="incomplete"):
        ens.load_manifest(tmp_path)
    seen = []
    monkeypatch.setattr(
        ens, "finetune_lora", lambda *a, **k: seen.append(k["desc"]) or real(*a, **k)
    )
    ens.train_ensemble("tiny", ds, 4, tmp_path, "pmixed", CFG, progress=False)
    assert seen == ["part-002", "part-003"]
    assert len(ens.load_manifest(tmp_path)["adapters"]) == 4


def test_resume_with_other_settings_is_refused(tmp_path):
    ens.train_ensemble("tiny", users_dataset(4), 2, tmp_path, "pmixed", CFG, progress=False)
    with pytest.raises(PrivlmError, match="other settings or data"):
        ens.train_ensemble("tiny", users_dataset(4), 3, tmp_path, "pmixed", CFG, progress=False)
    assert json.loads((tmp_path / "manifest.json").read_text())["n_parts"] == 2


def test_too_few_units(tmp_path):
    with pytest.raises(PrivlmError, match="cannot split 2 privacy units"):
        ens.train_ensemble("tiny", users_dataset(2), 3, tmp_path, "pmixed", CFG, progress=False)
