"""What will not fit is refused before any work, with estimates checked
against what the tiny model really allocates."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from privlm.accounting import Budget, PrivacyLedger
from privlm.errors import ModelLoadError
from privlm.models import load_public_model, memory
from privlm.predict import PMixED, PMixEDConfig
from privlm.predict.engine import CachedDecoder, EnsembleEngine


def test_model_bytes_counts_the_real_parameters():
    lm = load_public_model("tiny", device="cpu")
    real = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    assert memory.model_bytes(lm.model.config, torch.float32) == real
    assert memory.model_bytes(lm.model.config, torch.bfloat16) == real // 2


def test_kv_cache_bytes_is_what_the_cache_holds():
    lm = load_public_model("tiny", device="cpu")
    cache = DynamicCache()
    with torch.no_grad():
        lm.model(input_ids=torch.ones((3, 7), dtype=torch.long), past_key_values=cache)
    held = sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )
    assert memory.kv_cache_bytes(lm.model.config, torch.float32, 3, 7) == held


def test_a_model_that_does_not_fit_is_refused_before_loading(monkeypatch, tmp_path):
    lm = load_public_model("tiny", device="cpu")
    lm.model.save_pretrained(tmp_path / "m")
    lm.tokenizer.save_pretrained(tmp_path / "m")
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    with pytest.raises(ModelLoadError, match=r"needs about .* GiB on cpu, which has"):
        load_public_model(str(tmp_path / "m"), device="cpu")


def test_adapters_and_kv_cache_that_do_not_fit_are_refused_before_any_charge(
    monkeypatch, adapter_dirs, tmp_path
):
    lm = load_public_model("tiny", device="cpu")
    engine = EnsembleEngine.from_directories(lm.model, adapter_dirs)
    ledger = PrivacyLedger(tmp_path / "l.db", "m", Budget(8.0, 1e-5))
    pmixed = PMixED(
        engine,
        lm.tokenizer,
        ledger,
        PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=64, sample_rate=1.0),
    )
    kv_one = memory.kv_cache_bytes(lm.model.config, torch.float32, 5, 1)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(kv_one * 20))
    CachedDecoder(engine, [1, 2, 3], [-1, 0, 1, 2, 3], reserve=4)  # 7 tokens: fits
    with pytest.raises(ModelLoadError, match="KV cache of 5 rows"):
        pmixed.generate("Hello", max_new_tokens=60)
    assert ledger.count() == 0  # refused before any token was charged
    monkeypatch.setattr(memory, "free_bytes", lambda device: 10)
    with pytest.raises(ModelLoadError, match="stacked adapters"):
        EnsembleEngine.from_directories(load_public_model("tiny", device="cpu").model, adapter_dirs)
