"""A tiny trained-looking ensemble: random (non-zero) LoRA adapters on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from privlm.models import load_public_model
from privlm.predict.engine import EnsembleEngine
from privlm.training.lora_targets import discover_lora_targets


def make_adapters(root: Path, n: int, seed: int = 0) -> list[Path]:
    paths = []
    for i in range(n):
        lm = load_public_model("tiny")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + i)
            model = get_peft_model(
                lm.model,
                LoraConfig(
                    r=4,
                    lora_alpha=8,
                    target_modules=discover_lora_targets(lm.model),
                    init_lora_weights=False,
                ),
            )
        model.save_pretrained(root / f"a{i}")
        paths.append(root / f"a{i}")
    return paths


@pytest.fixture(scope="session")
def adapter_dirs(tmp_path_factory):
    return make_adapters(tmp_path_factory.mktemp("adapters"), 4)


@pytest.fixture
def engine(adapter_dirs):
    lm = load_public_model("tiny")
    return EnsembleEngine.from_directories(lm.model, adapter_dirs), lm.tokenizer
