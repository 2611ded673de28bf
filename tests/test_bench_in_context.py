"""bench_in_context's memory path: the output layer applied one position at a time gives
the logits of the whole block, through the engine's row chunking, and leaves the model as
it was (docs/results.md, "In-context members budgeted for 100,000 tokens")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from privlm.models import load_public_model
from privlm.predict.in_context import SCORE_ROWS, InContextEngine

BENCH = Path(__file__).parent.parent / "bench" / "bench_in_context.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_in_context", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_head_per_position_equals_the_blocks_logits(bench):
    lm = load_public_model("tiny", device="cpu")
    prompts = [[3 + i % 7, 5 + i % 3][: 1 + i % 2] if i % 5 else [] for i in range(SCORE_ROWS + 6)]
    engine = InContextEngine(lm.model, prompts, pad_id=0)
    rows = torch.arange(-1, len(prompts))  # more rows than one scoring pass takes
    ids = torch.tensor([[2, 9, 4, 7, 1]] * len(rows))
    want, _ = engine.logits(ids, rows)
    head = lm.model.lm_head
    got, cache = bench.HiddenStatesEngine(engine).logits(ids, rows)
    assert cache is None and lm.model.lm_head is head
    assert got.shape == want.shape
    for t in range(ids.shape[1]):
        assert torch.allclose(got[:, t], want[:, t], rtol=1e-5, atol=1e-5)


def test_references_are_refused_for_other_tokens(bench, tmp_path):
    earlier = tmp_path / "earlier.json"
    earlier.write_text('{"perplexity": {"public": 48.837, "finetuned": 28.87}}')
    assert bench.read_references(earlier, 48.8372)["finetuned"] == 28.87
    with pytest.raises(SystemExit, match="not the same tokens"):
        bench.read_references(earlier, 47.0)
