"""Every artefact privlm writes carries a model card with its guarantee, and its
adapters load in plain PEFT on the base model named in their config, giving privlm's logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from peft import PeftModel

from privlm.data import Dataset, Record
from privlm.models import load_public_model
from privlm.models.loading import base_model_id
from privlm.predict.loading import load_ensemble
from privlm.prompting.prompt_dpsgd import (
    PromptDpSgdConfig,
    TaskExamples,
    class_logits,
    encode_examples,
    train_prompt_dpsgd,
)
from privlm.prompting.serving import prompt_adapter_accuracy
from privlm.prompting.tasks import get_task, label_token_ids
from privlm.training.config import EnsembleConfig, LoraTrainingConfig
from privlm.training.dpsgd import DpSgdConfig, train_dpsgd
from privlm.training.ensemble import train_ensemble
from privlm.training.model_card import model_card

NOTES = [Record(f"note {i}: the patient in room {i} is feeling better", f"user-{i % 6}")
         for i in range(24)]  # fmt: skip


@pytest.mark.fast
def test_base_models_are_named_by_a_loadable_id(tmp_path):
    assert base_model_id("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_id(str(tmp_path)) == str(tmp_path.resolve())
    assert base_model_id("meta-llama/Llama-3.2-1B") == "meta-llama/Llama-3.2-1B"
    card = model_card({"epsilon": 3.0, "delta": 1e-5, "model": "smollm2-135m", "units": 9})
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card


def test_a_dpsgd_adapter_states_its_guarantee_and_loads_in_plain_peft(tmp_path):
    cfg = DpSgdConfig(target_epsilon=4.0, batch_size=4, physical_batch_size=4, epochs=1,
                      block_size=16)  # fmt: skip
    train_dpsgd("tiny", Dataset(NOTES, "notes", "user"), tmp_path / "dp", cfg, progress=False)
    card = (tmp_path / "dp" / "README.md").read_text()
    for needed in ("-DP per user", "Accountant:** rdp", "neighbouring datasets differ",
                   "Data size:** 6 units", "Base model:** tiny", "does not cover"):  # fmt: skip
        assert needed in card, needed
    config = json.loads((tmp_path / "dp" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"


def test_ensemble_members_load_in_plain_peft_with_privlms_logits(tmp_path):
    cfg = LoraTrainingConfig(epochs=1, block_size=16, max_blocks=2, learning_rate=1e-2)  # moves
    ds = Dataset(NOTES, "notes", "user")
    # a fixed key that gives both parts records (16 and 8): a fresh key leaves a part empty
    # one time in 32, and an empty part's member is the public model itself
    train_ensemble(
        "tiny", ds, tmp_path / "ens", EnsembleConfig(parts=2, training=cfg), progress=False,
        partition_key="11" * 32,
    )  # fmt: skip
    card = (tmp_path / "ens" / "README.md").read_text()
    assert "none by itself" in card and "Data size:** 6 units in 2 parts" in card
    lm, engine, manifest = load_ensemble(tmp_path / "ens", "cpu", "float32")
    ids = torch.tensor([lm.tokenizer("the patient is")["input_ids"]])
    for row, part in enumerate(manifest.partition):
        assert "do not release it" in (tmp_path / "ens" / part / "README.md").read_text()
        config = json.loads((tmp_path / "ens" / part / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == "tiny"
        plain = PeftModel.from_pretrained(load_public_model("tiny").model, tmp_path / "ens" / part)
        with torch.no_grad():
            expected = plain.eval()(input_ids=ids).logits.float()
            ours, _ = engine.logits(ids, torch.tensor([row]))
        torch.testing.assert_close(ours.float(), expected, atol=1e-4, rtol=1e-4)
        public, _ = engine.logits(ids, torch.tensor([-1]))
        assert not torch.allclose(public.float(), expected, atol=1e-4)  # the adapter matters


@pytest.mark.parametrize("kind", ["soft-prompt", "prefix"])
def test_prompt_adapters_state_their_guarantee_and_load_in_plain_peft(tmp_path, kind):
    task = get_task("sst2")
    recs = [Record(f"film {i}", f"r{i}", "positive" if i % 2 else "negative") for i in range(20)]
    cfg = PromptDpSgdConfig(kind=kind, virtual_tokens=3, target_epsilon=8.0, batch_size=10,
                            epochs=1, learning_rate=0.5)  # fmt: skip
    st = train_prompt_dpsgd("tiny", TaskExamples(task, recs), tmp_path / "p", cfg, progress=False)
    card = (tmp_path / "p" / "README.md").read_text()
    for needed in (f"({st.epsilon:.4g}, ", "-DP per user", "Base model:** tiny",
                   "Data size:** 20 units", "does not cover"):  # fmt: skip
        assert needed in card, needed
    config = json.loads((tmp_path / "p" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"
    lm = load_public_model("tiny")
    test = recs[:8]
    ids, mask, last, _ = encode_examples(lm, task, test, 64)
    label_ids = label_token_ids(task, lm.tokenizer)
    plain = PeftModel.from_pretrained(load_public_model("tiny").model, tmp_path / "p").eval()
    with torch.no_grad():
        scores = class_logits(plain, ids, mask, last, label_ids)
        base = class_logits(lm.model, ids, mask, last, label_ids)
    assert not torch.allclose(scores, base, atol=1e-4)  # the prompt matters
    truth = np.array([task.class_of(r) for r in test])
    plain_accuracy = float(np.mean(scores.argmax(-1).numpy() == truth))
    assert prompt_adapter_accuracy("tiny", tmp_path / "p", task, test) == plain_accuracy
