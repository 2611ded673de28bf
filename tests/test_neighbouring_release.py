"""What leaves with an artefact, on neighbouring datasets (docs/sharp_edges.md).

Each mechanism runs on D and on D without one unit. Every released file other than the
noisy output (adapter or prompt weights; the student prompt's noisy labels) must be
identical, up to fields random by design (keys, seeds) and the fields computed from the
number of units, which privlm declares public (the sampling rate, the steps, σ, the ε σ
reaches). The exact statistics of the data go to the curator's report *beside* the
artefact, never inside it. Every model card is a function of the released statement only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privlm.curator import curator_report_path
from privlm.data import Dataset, Record
from privlm.training.model_card import model_card

NOISY = {"adapter_model.safetensors", "student_prompt.json"}
RANDOM_BY_DESIGN = {"partition_key", "seed", "created_at"}
SIZE_DERIVED = {  # functions of the number of units, public by declaration
    "units", "sample_rate", "steps", "noise_multiplier", "epsilon", "accounted_sample_rate",
    "delta_warning", "epsilon_range", "dp_epsilon",
}  # fmt: skip


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items() if k not in RANDOM_BY_DESIGN | SIZE_DERIVED}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def released_files(out: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name not in NOISY:
            text = path.read_text()
            files[str(path.relative_to(out))] = (
                masked(json.loads(text)) if path.suffix == ".json" else text
            )
    return files


def assert_names_no_local_path(out: Path) -> None:
    """No released file names a local path: the output directory, a scratch folder beside
    it (JFT's phase 1), or anything else under the test's temporary directory."""
    for path in out.rglob("*"):
        if path.is_file() and path.suffix != ".safetensors":
            text = path.read_text(errors="replace")
            assert str(out.parent) not in text, path
            assert "phase1-" not in text, path  # a scratch folder, by its name alone


def assert_neighbours_release_the_same(full: Path, less: Path) -> None:
    for out in (full, less):
        assert_names_no_local_path(out)
    a, b = released_files(full), released_files(less)
    assert a.keys() == b.keys()
    for name in a:
        if name != "README.md":
            assert a[name] == b[name], name
    for out in (full, less):  # the card says only what the released statement says
        statement = json.loads((out / "privacy.json").read_text())
        card = (out / "README.md").read_text()
        assert card == model_card(statement)
        for secret in ("token_usage", "redacted_token_fraction", "seconds"):
            assert secret not in (out / "privacy.json").read_text(), secret
    reports = [json.loads(curator_report_path(o).read_text()) for o in (full, less)]
    assert all("not private: for the curator" in r["note"] for r in reports)
    assert reports[0]["statistics"] != reports[1]["statistics"]  # where the counts went


NOTES = [
    Record(f"note {i}: the patient in room {i} " + "is feeling much better " * (i % 5), f"r{i}")
    for i in range(30)
]


def small_dpsgd(**kw):
    from privlm.training.dpsgd import DpSgdConfig

    base = dict(target_epsilon=4.0, batch_size=6, physical_batch_size=6, epochs=1,
                block_size=16, delta=1e-5)  # fmt: skip
    return DpSgdConfig(**{**base, **kw})


@pytest.mark.parametrize("unit", ["record", "user"])
def test_dpsgd_releases_nothing_of_one_unit_but_noise(tmp_path, unit):
    from privlm.training.dpsgd import train_dpsgd

    records = NOTES if unit == "record" else [Record(r.text, f"user-{i % 6}") for i, r in
                                               enumerate(NOTES)]  # fmt: skip
    gone = records[17].unit
    less = [r for r in records if r.unit != gone]
    for name, recs in (("full", records), ("less", less)):
        train_dpsgd("tiny", Dataset(recs, "notes", unit), tmp_path / name, small_dpsgd(),
                    progress=False)  # fmt: skip
    assert_neighbours_release_the_same(tmp_path / "full", tmp_path / "less")


def test_jft_releases_nothing_of_one_unit_but_noise(tmp_path):
    from privlm.training.jft import JftConfig, train_jft
    from privlm.training.lora_finetune import LoraTrainingConfig

    names = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank"]
    recs = [Record(f"{names[i % 6]} paid invoice {1000 + i} on time", f"r{i}") for i in range(30)]
    cfg = JftConfig(
        detector="regex",
        phase1_training=LoraTrainingConfig(epochs=1, pack=False, block_size=16, batch_size=8),
        phase2=small_dpsgd(target_epsilon=3.0),
    )
    for name, data in (("full", recs), ("less", recs[:17] + recs[18:])):
        train_jft("tiny", Dataset(data, "notes", "record"), tmp_path / name, cfg, progress=False)
    assert_neighbours_release_the_same(tmp_path / "full", tmp_path / "less")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "full",
        "full.curator.json",
        "less",
        "less.curator.json",
    ]  # no phase-1 adapter left behind, and nothing else


def test_prompt_dpsgd_releases_nothing_of_one_unit_but_noise(tmp_path):
    from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
    from privlm.prompting.tasks import get_task

    task = get_task("sst2")
    recs = [Record(f"film {i} " + "quite good " * (i % 4), f"u{i % 10}",
                   "positive" if i % 2 else "negative") for i in range(30)]  # fmt: skip
    cfg = PromptDpSgdConfig(kind="soft-prompt", virtual_tokens=3, target_epsilon=8.0,
                            batch_size=10, epochs=1, learning_rate=0.5, delta=1e-6, unit="user")  # fmt: skip
    for name, data in (("full", recs), ("less", [r for r in recs if r.unit != "u3"])):
        train_prompt_dpsgd("tiny", TaskExamples(task, data), tmp_path / name, cfg, progress=False)
    assert_neighbours_release_the_same(tmp_path / "full", tmp_path / "less")


def test_prompt_pate_releases_nothing_of_one_unit_but_its_labels(tmp_path, monkeypatch):
    from privlm.models import load_public_model
    from privlm.prompting import pate_pipeline
    from privlm.prompting.pate_pipeline import (
        PateExamples,
        PromptPateConfig,
        pate_ledger,
        run_prompt_pate,
    )
    from privlm.prompting.tasks import get_task

    def answers(lm, task, teachers, public, batch_size, progress):
        labels = np.array([i % 2 for i in range(len(public))])
        rows = len(teachers)
        top1 = np.tile(labels, (rows, 1))
        top1[[t.abstains for t in teachers]] = -1  # a teacher with no example says "other"
        return pate_pipeline.TeacherAnswers(top1, np.tile(labels, (rows, 1)))

    monkeypatch.setattr(pate_pipeline, "teacher_answer_matrix", answers)
    lm, task = load_public_model("tiny"), get_task("sst2")
    private = [Record(f"secret film {i}", f"r{i}", "positive" if i % 2 else "negative")
               for i in range(60)]  # fmt: skip
    public = [Record(f"public film {i}", f"p{i}") for i in range(20)]
    cfg = PromptPateConfig(
        teachers=20, threshold=5, sigma_threshold=2, sigma=4, epsilon=50, student_candidates=2,
        holdout=3, batch_size=16, queries=12, delta=1e-6,
    )  # fmt: skip
    for name, data in (("full", private), ("less", private[:17] + private[18:])):
        ledger = pate_ledger(tmp_path / f"{name}.db", "pate", cfg, len(data))
        run_prompt_pate(lm, PateExamples(task, data, public), tmp_path / name, cfg,
                        ledger=ledger, progress=False)  # fmt: skip
    for out in (tmp_path / "full", tmp_path / "less"):
        assert_names_no_local_path(out)
    a, b = released_files(tmp_path / "full"), released_files(tmp_path / "less")
    assert a.keys() == b.keys()
    strip = {"answered", "queries"}  # the noisy labels' own counts: covered by ε
    assert {k: v for k, v in a["privacy.json"].items() if k not in strip} == {
        k: v for k, v in b["privacy.json"].items() if k not in strip
    }
    assert "abstaining_teachers" not in (tmp_path / "full" / "privacy.json").read_text()
    report = json.loads(curator_report_path(tmp_path / "full").read_text())
    assert "abstaining_teachers" in report["statistics"]


def test_an_ensemble_holds_nothing_of_one_unit_but_its_adapters(tmp_path):
    """A PMixED/SubMix ensemble stays with its curator (its adapters saw their parts in the
    clear), yet nothing beside the adapters' weights depends on one unit: the manifest and
    the cards hold the settings, the key and the number of units (public by declaration);
    each part's size, which parts are empty, token usage, losses and times, and a digest of
    the set of units are in the curator's report beside it. What a deployment releases is
    its tokens, each charged as it leaves (tests/predict)."""
    from privlm.training.config import EnsembleConfig, LoraTrainingConfig
    from privlm.training.ensemble import train_ensemble
    from privlm.training.model_card import ensemble_card

    cfg = LoraTrainingConfig(epochs=1, block_size=16, batch_size=4)
    users = [Record(r.text, f"user-{i % 6}") for i, r in enumerate(NOTES)]
    for protocol in ("pmixed", "submix"):
        full, less = tmp_path / f"{protocol}-full", tmp_path / f"{protocol}-less"
        for out, recs in ((full, users), (less, [r for r in users if r.unit != "user-5"])):
            train_ensemble("tiny", Dataset(recs, "notes", "user"), out,
                           EnsembleConfig(parts=2, protocol=protocol, training=cfg), progress=False,
                           partition_key="0" * 32)  # fmt: skip
        a, b = released_files(full), released_files(less)
        assert a.keys() == b.keys() and "manifest.json" in a
        for name in a:
            if not name.endswith("README.md"):
                assert a[name] == b[name], (protocol, name)
        for out in (full, less):  # every card is a function of the manifest only
            manifest = json.loads((out / "manifest.json").read_text())
            assert (out / "README.md").read_text() == ensemble_card(manifest)
            for part in manifest["partition"]:
                card = (out / part["name"] / "README.md").read_text()
                assert card == ensemble_card(manifest, member=part["name"])
        reports = [json.loads(curator_report_path(o).read_text()) for o in (full, less)]
        assert all("not private: for the curator" in r["note"] for r in reports)
        sizes = [[p["units"] for p in r["statistics"]["partition"]] for r in reports]
        assert sum(sizes[0]) == sum(sizes[1]) + 1  # where the counts went


def test_a_screened_deployment_releases_nothing_of_one_unit_but_its_transcript(tmp_path):
    """Screened PMixED on ensembles trained on D and on D without one unit (a member's model
    replaced): beside its tokens, a deployment releases its budget. Everything in it but the
    transcript's own functions (the ⊤/⊥ pattern's paid count, the ε it spent) is the same,
    and its ledger's charges differ only in how many there are."""
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict.config import ScreenedPMixEDConfig
    from privlm.predict.loading import load_ensemble
    from privlm.predict.screened import ScreenedPMixED
    from privlm.training.config import EnsembleConfig, LoraTrainingConfig
    from privlm.training.ensemble import train_ensemble

    cfg = LoraTrainingConfig(epochs=1, block_size=16, batch_size=4)
    users = [Record(r.text, f"user-{i % 6}") for i, r in enumerate(NOTES)]
    screen = ScreenedPMixEDConfig(paid_tokens=3, threshold=0.05, sample_rate=0.5)
    transcript = {"spent", "remaining", "queries", "exhausted"}
    budgets, charges = [], []
    for name, recs in (("full", users), ("less", [r for r in users if r.unit != "user-5"])):
        out = tmp_path / name
        train_ensemble("tiny", Dataset(recs, "notes", "user"), out,
                       EnsembleConfig(parts=2, protocol="pmixed", training=cfg), progress=False,
                       partition_key="0" * 32)  # fmt: skip
        loaded = load_ensemble(out, "cpu", "float32")
        ledger = PrivacyLedger(tmp_path / f"{name}.db", "dep", Budget(screen.epsilon, screen.delta))
        predictor = ScreenedPMixED(loaded.engine, loaded.model.tokenizer, ledger, screen)
        before = predictor.budget()
        predictor.generate("the patient", max_new_tokens=6)
        after = predictor.budget()
        assert {k: v for k, v in after.items() if k not in transcript} == {
            k: v for k, v in before.items() if k not in transcript
        }
        budgets.append(before)
        charges.append({json.dumps({k: v for k, v in c.params.items()
                                    if k not in ("paid", "instance")}, sort_keys=True)
                        for c in ledger.charges()})  # fmt: skip
    assert budgets[0] == budgets[1]
    # one set of parameters per kind of charge (an instance, a paid query) on both sides:
    # how many of each there are is the transcript's, their parameters are the config's
    assert len(charges[0] | charges[1]) <= 2


@pytest.mark.parametrize("unit", ["record", "user"])
def test_synth_releases_nothing_of_one_unit_but_its_texts(tmp_path, unit):
    """The synthetic texts are the noisy output; the statement beside them is identical,
    and the run's private folder (state, per-text ledgers) is not released."""
    from privlm.synth import SynthConfig, synthesize

    records = NOTES if unit == "record" else [Record(r.text, f"user-{i % 6}") for i, r in
                                               enumerate(NOTES)]  # fmt: skip
    gone = records[17].unit
    less = [r for r in records if r.unit != gone]
    cfg = SynthConfig(count=3, max_tokens=3, members=2, prompt_tokens=16, seed=3)
    for name, recs in (("full", records), ("less", less)):
        (tmp_path / name).mkdir()
        synthesize("tiny", Dataset(recs, "notes", unit), tmp_path / name / "synth.jsonl", cfg,
                   progress=False)  # fmt: skip
    released = {
        name: {p.name: p.read_bytes() for p in (tmp_path / name).iterdir() if p.is_file()}
        for name in ("full", "less")
    }  # fmt: skip
    for files in released.values():
        assert sorted(files) == ["synth.jsonl", "synth.jsonl.privacy.json"]
        assert str(tmp_path).encode() not in files["synth.jsonl.privacy.json"]
    statement = "synth.jsonl.privacy.json"
    assert released["full"][statement] == released["less"][statement]
    assert len(released["full"]["synth.jsonl"].splitlines()) == 3
    assert len(released["less"]["synth.jsonl"].splitlines()) == 3


@pytest.mark.parametrize("unit", ["record", "user"])
def test_dp_lora_synth_releases_nothing_of_one_unit_but_its_texts(tmp_path, unit):
    """dp-lora: the texts are the noisy output (samples of the DP adapter); its statement
    is identical up to the fields computed from the number of units, and the adapter stays
    in the run's private folder."""
    from privlm.synth import SynthConfig, synthesize

    records = NOTES if unit == "record" else [Record(r.text, f"user-{i % 6}") for i, r in
                                               enumerate(NOTES)]  # fmt: skip
    gone = records[17].unit
    less = [r for r in records if r.unit != gone]
    cfg = SynthConfig(generator="dp-lora", count=3, max_tokens=3, seed=3, train_batch_size=4,
                      train_epochs=1)  # fmt: skip
    for name, recs in (("full", records), ("less", less)):
        (tmp_path / name).mkdir()
        synthesize("tiny", Dataset(recs, "notes", unit), tmp_path / name / "synth.jsonl", cfg,
                   progress=False)  # fmt: skip
    released = {
        name: {p.name: p.read_text() for p in (tmp_path / name).iterdir() if p.is_file()}
        for name in ("full", "less")
    }  # fmt: skip
    for files in released.values():
        assert sorted(files) == ["synth.jsonl", "synth.jsonl.privacy.json"]
        assert str(tmp_path) not in files["synth.jsonl.privacy.json"]
    statement = "synth.jsonl.privacy.json"
    a, b = (json.loads(released[n][statement]) for n in ("full", "less"))
    assert a["units"] == b["units"] + 1  # declared public: the only difference, with σ's
    assert masked(a) == masked(b)
    assert len(released["less"]["synth.jsonl"].splitlines()) == 3
