"""Every training entry point accepts a loaded model as well as a name, gives
the same adapter either way, records a name the model can be loaded again by, and leaves the
caller's model as it was (PEFT wraps its model in place, so privlm trains a copy)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import LoadedModel, load_public_model, reference_of, working_copy
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
from privlm.prompting.tasks import get_task
from privlm.training.config import EnsembleConfig, LoraTrainingConfig
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.ensemble import train_ensemble

NOTES = [Record(f"note {i}: the patient in room {i} is feeling better", f"user-{i % 6}")
         for i in range(24)]  # fmt: skip


def snapshot(lm: LoadedModel) -> tuple[dict[str, torch.Tensor], dict[str, bool], list[str]]:
    model = lm.model
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = {k: p.requires_grad for k, p in model.named_parameters()}
    return state, grads, [type(m).__name__ for m in model.modules()]


def assert_unchanged(lm: LoadedModel, before: tuple) -> None:
    state, grads, modules = snapshot(lm)
    assert modules == before[2]  # no LoRA layers inserted
    assert grads == before[1]  # nothing frozen
    assert state.keys() == before[0].keys()
    for k, v in state.items():
        assert torch.equal(v, before[0][k]), k


def weights(path):
    return load_file(str(path / "adapter_model.safetensors"))


def test_dpsgd_from_a_loaded_model_equals_dpsgd_from_its_name(tmp_path):
    cfg = DpSgdConfig(target_epsilon=4.0, batch_size=4, physical_batch_size=4, epochs=1,
                      block_size=16, seed=7)  # fmt: skip
    ds = Dataset(NOTES, "notes", "user")
    by_name = train_dpsgd("tiny", ds, tmp_path / "a", cfg, progress=False)
    lm = load_public_model("tiny", device="cpu")
    before = snapshot(lm)
    loaded = train_dpsgd(lm, ds, tmp_path / "b", cfg, progress=False)
    assert_unchanged(lm, before)
    assert loaded.epsilon == by_name.epsilon
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    privacy = json.loads((tmp_path / "b" / "privacy.json").read_text())
    assert privacy["model"] == "tiny"
    config = json.loads((tmp_path / "b" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"


def test_an_ensemble_trains_from_a_loaded_model_and_records_its_name(tmp_path):
    lm = load_public_model("tiny", device="cpu")
    before = snapshot(lm)
    cfg = LoraTrainingConfig(epochs=1, block_size=16, max_blocks=2)
    manifest = train_ensemble(lm, Dataset(NOTES, "notes", "user"), tmp_path / "e",
                              EnsembleConfig(parts=2, training=cfg), progress=False)  # fmt: skip
    assert_unchanged(lm, before)
    assert manifest.model == "tiny"
    assert all(a["status"] == "done" for a in manifest.adapters.values())
    with pytest.raises(PrivlmError, match="Ray workers load the model themselves"):
        train_ensemble(lm, Dataset(NOTES, "notes", "user"), tmp_path / "r",
                       EnsembleConfig(parts=2, training=cfg), progress=False,
                       ray_address="local")  # fmt: skip


def test_prompt_dpsgd_from_a_loaded_model_leaves_it_unchanged(tmp_path):
    lm = load_public_model("tiny", device="cpu")
    before = snapshot(lm)
    recs = [Record(f"film {i}", f"r{i}", "positive" if i % 2 else "negative") for i in range(20)]
    cfg = PromptDpSgdConfig(virtual_tokens=3, target_epsilon=8.0, batch_size=10, epochs=1)
    train_prompt_dpsgd(
        lm, TaskExamples(get_task("sst2"), recs), tmp_path / "p", cfg, progress=False
    )
    assert_unchanged(lm, before)
    assert json.loads((tmp_path / "p" / "privacy.json").read_text())["model"] == "tiny"


def test_a_directory_is_recorded_by_its_absolute_path(tmp_path, monkeypatch):
    model_dir = tmp_path / "my-model"
    lm = load_public_model("tiny", device="cpu")
    lm.model.save_pretrained(model_dir)
    lm.tokenizer.save_pretrained(model_dir)
    monkeypatch.chdir(tmp_path)
    assert reference_of("my-model") == str(model_dir.resolve())
    assert load_public_model("my-model", device="cpu").reference == str(model_dir.resolve())
    assert reference_of("tiny") == "tiny" and reference_of("org/some-model") == "org/some-model"


def test_a_bare_transformers_model_is_refused_with_what_to_do_instead():
    lm = load_public_model("tiny", device="cpu")
    with pytest.raises(TypeError, match=r"LoadedModel\(model, tokenizer"):
        working_copy(lm.model, "cpu", "float32")  # type: ignore[arg-type]


def test_a_working_copy_is_placed_as_the_job_says():
    lm = load_public_model("tiny", device="cpu")
    copy_ = working_copy(lm, "cpu", "bfloat16")
    assert copy_.placement.dtype == torch.bfloat16 and lm.placement.dtype == torch.float32
    assert copy_.tokenizer is lm.tokenizer and copy_.reference == "tiny"
