"""Ensemble training: disjoint parts by unit, PEFT adapters, a manifest without text, resume."""

from __future__ import annotations

import json

import pytest
import torch

from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.predict.engine import EnsembleEngine
from privlm.training import ensemble as ens
from privlm.training.config import EnsembleConfig, LoraTrainingConfig

CFG = LoraTrainingConfig(epochs=1, block_size=32, batch_size=4, learning_rate=1e-2)
# a partition key under which the 8 users of users_dataset split evenly (2 per part of 4;
# 4 per part of 2, and 2 per SubMix half): found by search, so the tests below are exact
KEY = "000000000000000000000000000000f7"


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


def train(ds, out, parts, protocol="pmixed", key=KEY):
    """The tiny ensemble of ``ds`` in ``out`` (``key`` None: a fresh partition key)."""
    return ens.train_ensemble(
        "tiny", ds, out, EnsembleConfig(parts=parts, protocol=protocol, training=CFG),
        progress=False, partition_key=key,
    )  # fmt: skip


def test_pmixed_ensemble_manifest_and_adapters(tmp_path):
    ds = users_dataset()
    manifest = train(ds, tmp_path, 4, key=KEY)
    names = manifest.partition
    assert names == ["part-000", "part-001", "part-002", "part-003"]
    sizes = ens.ensemble_statistics(tmp_path)["partition"]
    assert [p["name"] for p in sizes] == names and sum(p["units"] for p in sizes) == 8
    assert manifest.privacy_unit == "user" and manifest.training["rank"] == 4
    assert all(manifest.adapters[n]["status"] == "done" for n in names)
    text = (tmp_path / "manifest.json").read_text()
    assert "secret" not in text and "patient" not in text
    engine = EnsembleEngine.from_directories(
        load_public_model("tiny").model, [tmp_path / n for n in names]
    )
    lp = engine.log_probs([1, 2, 3], [-1, 0, 1])
    assert not lp[0].allclose(lp[1])  # training moved the adapter away from the base


def test_submix_halves(tmp_path):
    manifest = train(users_dataset(), tmp_path, 2, "submix", key=KEY)
    assert manifest.partition == [
        "part-000-a",
        "part-000-b",
        "part-001-a",
        "part-001-b",
    ]
    assert all(p["units"] == 2 for p in ens.ensemble_statistics(tmp_path)["partition"])


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
        train(ds, tmp_path, 4, key=KEY)
    with pytest.raises(PrivlmError, match="incomplete"):
        ens.load_manifest(tmp_path)
    seen = []
    monkeypatch.setattr(
        ens, "finetune_lora", lambda *a, **k: seen.append(k["desc"]) or real(*a, **k)
    )
    # the resume takes the key from the manifest; another key is refused
    with pytest.raises(PrivlmError, match="another key"):
        train(ds, tmp_path, 4, key="ab")
    train(ds, tmp_path, 4, key=None)
    assert seen == ["part-002", "part-003"]
    assert len(ens.load_manifest(tmp_path).adapters) == 4


def test_resume_with_other_settings_is_refused(tmp_path):
    train(users_dataset(4), tmp_path, 2, key=KEY)
    with pytest.raises(PrivlmError, match="other settings or data"):
        train(users_dataset(4), tmp_path, 3, key=KEY)
    assert json.loads((tmp_path / "manifest.json").read_text())["n_parts"] == 2


def test_the_manifest_holds_no_statistic_of_the_data(tmp_path):
    """Part sizes, token usage, losses, times and a digest of the units are the curator's
    (``<out>.curator.json``, beside the folder); the manifest holds settings, the key and
    the number of units (public by declaration)."""
    train(users_dataset(4), tmp_path / "e", 2, key=KEY)
    manifest = json.loads((tmp_path / "e" / "manifest.json").read_text())
    assert manifest["partition"] == [{"name": "part-000"}, {"name": "part-001"}]
    assert all(a.keys() == {"status", "path"} for a in manifest["adapters"].values())
    assert "records" not in manifest and "units_fingerprint" not in manifest
    assert manifest["units"] == 4 and "public by declaration" in manifest["data_size"]
    report = json.loads((tmp_path / "e.curator.json").read_text())
    assert "not private" in report["note"]
    statistics = report["statistics"]
    assert statistics["records"] == 20 and len(statistics["units_fingerprint"]) == 16
    assert {"token_usage", "seconds", "final_loss"} <= statistics["adapters"]["part-000"].keys()


def test_a_legacy_manifest_is_migrated_and_resumes(tmp_path):
    """An ensemble started by an older privlm (statistics in its manifest) moves them to the
    curator's report when it is resumed, and still refuses other data."""
    ds = users_dataset(4)
    train(ds, tmp_path / "e", 2, key=KEY)
    path = tmp_path / "e" / "manifest.json"
    manifest = json.loads(path.read_text())
    statistics = ens.ensemble_statistics(tmp_path / "e")
    manifest.update(
        records=statistics["records"], units_fingerprint=statistics["units_fingerprint"]
    )
    manifest["partition"] = statistics["partition"]
    manifest["adapters"] = {
        n: {"status": "done", "path": n, **a} for n, a in statistics["adapters"].items()
    }
    path.write_text(json.dumps(manifest))
    (tmp_path / "e.curator.json").unlink()
    with pytest.raises(PrivlmError, match="other settings or data"):
        train(users_dataset(5), tmp_path / "e", 2, key=None)
    migrated = json.loads(path.read_text())
    assert "records" not in migrated and migrated["partition"][0].keys() == {"name"}
    assert ens.ensemble_statistics(tmp_path / "e")["partition"] == statistics["partition"]
    train(ds, tmp_path / "e", 2, key=None)


def test_a_resume_without_the_curators_report_is_refused(tmp_path):
    train(users_dataset(4), tmp_path / "e", 2, key=KEY)
    (tmp_path / "e.curator.json").unlink()
    with pytest.raises(PrivlmError, match="curator's report"):
        train(users_dataset(4), tmp_path / "e", 2, key=None)


@pytest.mark.fast
def test_too_few_units(tmp_path):
    with pytest.raises(PrivlmError, match="cannot split 2 privacy units"):
        train(users_dataset(2), tmp_path, 3, key=KEY)


def test_an_empty_part_gets_the_public_model(tmp_path):
    """Under this key the 3 users fill parts 0 and 1 only: part 2's member is the untrained
    adapter (B = 0), i.e. the public model, still a function of its own (empty) part."""
    manifest = train(users_dataset(3), tmp_path, 3, key="0" * 32)
    statistics = ens.ensemble_statistics(tmp_path)
    assert [p["units"] for p in statistics["partition"]] == [1, 2, 0]
    assert statistics["adapters"]["part-002"]["empty_part"]
    assert manifest.partition_key == "0" * 32 and "HMAC" in manifest.partition_rule
    engine = EnsembleEngine.from_directories(
        load_public_model("tiny").model, [tmp_path / "part-002", tmp_path / "part-000"]
    )
    lp = engine.log_probs([1, 2, 3], [-1, 0, 1])
    assert lp[0].allclose(lp[1]) and not lp[0].allclose(lp[2])


def test_a_fresh_key_is_drawn_and_recorded(tmp_path):
    a = train(users_dataset(4), tmp_path / "a", 2, key=None)
    b = train(users_dataset(4), tmp_path / "b", 2, key=None)
    assert len(a.partition_key) == 32 and a.partition_key != b.partition_key


def test_an_ensemble_trains_on_a_bf16_model_and_serves_privately(tmp_path):
    """Ensemble members on a bfloat16 base (a GPU's default), here on the CPU; the
    adapters are saved in float32, and PMixED serves them from a bf16 engine."""
    from safetensors.torch import load_file

    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict import PMixED, PMixEDConfig
    from privlm.predict.loading import load_ensemble

    cfg = LoraTrainingConfig(
        epochs=1, block_size=32, batch_size=4, learning_rate=1e-2, device="cpu", dtype="bf16"
    )
    manifest = ens.train_ensemble(
        "tiny",
        users_dataset(),
        tmp_path,
        EnsembleConfig(parts=2, protocol="pmixed", training=cfg),
        progress=False,
        partition_key=KEY,
    )
    adapters = ens.ensemble_statistics(tmp_path)["adapters"]
    assert len(manifest.adapters) == 2 and {a["dtype"] for a in adapters.values()} == {"bfloat16"}
    weights = load_file(str(tmp_path / "part-000" / "adapter_model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.float32}
    lm, engine, _ = load_ensemble(tmp_path, device="cpu", dtype="bfloat16")
    ledger = PrivacyLedger(tmp_path / "l.db", "bf16", Budget(8.0, 1e-5))
    gen = PMixED(
        engine,
        lm.tokenizer,
        ledger,
        PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=8, sample_rate=1.0),
    ).generate("secret", max_new_tokens=3)
    assert ledger.count() == len(gen.token_ids) >= 1
