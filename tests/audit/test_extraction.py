"""The random-code extraction attack: codes, scoring, and the three attacked models."""

from __future__ import annotations

import pytest

from privlm.audit.config import ExtractionConfig
from privlm.audit.extraction import PREFIX, code_corpus, extract_code, make_codes, run_extraction
from privlm.errors import PrivlmError
from privlm.training.lora_finetune import LoraTrainingConfig


@pytest.mark.fast
def test_codes_are_distinct_digits_of_the_given_length():
    codes = make_codes(50, 3, seed=1)
    assert len(set(codes)) == 50 and all(len(c) == 3 and c.isdigit() for c in codes)
    assert make_codes(5, 4, seed=2) == make_codes(5, 4, seed=2)
    ds = code_corpus(codes[:4])
    assert ds.unit_kind == "user" and len(ds.units()) == 4
    assert ds.records[0].text == f"{PREFIX} {codes[0]}"


@pytest.mark.fast
@pytest.mark.parametrize(
    ("text", "code"),
    [
        (" 1234", "1234"),
        (" 1234<eos>", "1234"),
        (" 12345", None),
        (" 12 34", None),
        (" no digits", None),
        ("0007 x", "0007"),
    ],
)
def test_only_an_exact_length_code_counts(text, code):
    assert extract_code(text, 4) == code


def test_attack_runs_all_three_models_within_budget(tmp_path):
    cfg = LoraTrainingConfig(epochs=2, learning_rate=1e-2, batch_size=2, block_size=16, pack=False)
    attack = ExtractionConfig(codes=2, length=2, generations=3, seed=0)
    out = run_extraction("tiny", attack, training=cfg, workdir=tmp_path, progress=False)
    methods = [r["method"] for r in out["results"]]
    assert methods == ["finetuned", "pmixed", "submix"]
    for r in out["results"]:
        assert r["generations"] == 3 and 0 <= r["hits"] <= 3
    pm, sm = out["results"][1], out["results"][2]
    assert 0 < pm["epsilon_spent"] <= 8.0
    assert 0 <= sm["epsilon_spent"] <= 2.0
    assert out["chance_hit_rate"] == 0.02
    with pytest.raises(PrivlmError, match="codes must be an even number"):
        ExtractionConfig(codes=3)
