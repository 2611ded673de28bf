"""Many soft prompts in one forward pass equal PEFT serving each adapter alone."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from typer.testing import CliRunner

from privlm.cli import app
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, TaskExamples, train_prompt_dpsgd
from privlm.prompting.serving import SoftPromptBank
from privlm.prompting.tasks import get_task
from tests.conftest import requires_data

TASK = get_task("sst2")


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompts")
    recs = [Record(f"film {i}", f"r{i}", "positive" if i % 2 else "negative") for i in range(20)]
    out = []
    for seed in (0, 1):
        cfg = PromptDpSgdConfig(
            virtual_tokens=3, target_epsilon=8.0, batch_size=10, epochs=1, seed=seed
        )
        train_prompt_dpsgd("tiny", TaskExamples(TASK, recs), root / f"p{seed}", cfg, progress=False)
        out.append(root / f"p{seed}")
    return out


def test_a_mixed_batch_equals_each_adapter_served_by_peft(adapters):
    bank = SoftPromptBank(load_public_model("tiny"), adapters)
    rows = [(0, "Review: fine\nSentiment:"), (1, "Review: a long dull film\nSentiment:"), (1, "x")]
    mixed = bank.next_token_logits(rows)
    for i, (idx, text) in enumerate(rows):
        peft = PeftModel.from_pretrained(load_public_model("tiny").model, adapters[idx]).eval()
        ids = torch.tensor(
            [load_public_model("tiny").tokenizer(text, add_special_tokens=False)["input_ids"]]
        )
        with torch.no_grad():
            alone = peft(input_ids=ids).logits[0, -1]
        assert torch.allclose(mixed[i], alone, atol=1e-4), i


def test_the_bank_refuses_what_is_not_a_soft_prompt(tmp_path):
    with pytest.raises(PrivlmError, match="not a saved prompt adapter"):
        SoftPromptBank(load_public_model("tiny"), [tmp_path])


@requires_data
def test_cli_prompt_dpsgd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its default ledger
    res = CliRunner().invoke(
        app,
        ["prompt", "dpsgd", "--out", str(tmp_path / "sp"), "--model", "tiny", "--private", "40",
         "--batch-size", "10", "--epochs", "1", "--virtual-tokens", "3", "--test", "20",
         "--epsilon", "3", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["epsilon"] <= 3 and 0 <= out["test_accuracy"] <= 1 and out["units"] == 40


@requires_data
def test_cli_prompt_pate_says_why_when_nothing_is_labelled(tmp_path):
    res = CliRunner().invoke(
        app,
        ["prompt", "pate", "--out", str(tmp_path / "st"), "--model", "tiny", "--teachers", "4",
         "--public", "6", "--threshold", "1000", "--test", "0", "--ledger", str(tmp_path / "l.db")],
    )  # fmt: skip
    assert res.exit_code == 2
    assert "were labelled" in res.output
