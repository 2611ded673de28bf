"""The GPU benchmark's code paths, at tiny sizes on the CPU, so the script cannot rot
between GPU runs. Its figures come only from a GPU (docs/results.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def quick(bench, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--device", "cpu", "--quick"])
    return bench.parse()


def test_the_real_configs_are_the_real_sizes(bench):
    """Random weights at the published shapes: 135M, 1.24B and 8.03B parameters."""
    import torch

    sizes = {}
    for name in ("smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"):
        model = bench.build_model(name, torch.device("meta"), torch.bfloat16)
        sizes[name] = sum(p.numel() for p in model.parameters()) / 1e9
    assert sizes == pytest.approx({"smollm2-135m": 0.1345, "llama-3.2-1b": 1.2358,
                                   "llama-3.1-8b": 8.0303}, rel=1e-3)  # fmt: skip


@pytest.mark.parametrize("section", ["pmixed", "submix", "exposure", "pate"])
def test_each_section_runs_and_reports_its_baseline(bench, quick, section):
    out = bench.RUN[section]("tiny-llama", quick)
    json.dumps(out)  # what the parent process reads
    ratio = {"pmixed": "pmixed_over_public", "submix": "submix_over_public",
             "exposure": "candidates_per_s", "pate": "queries_per_s"}[section]  # fmt: skip
    assert out[ratio] > 0


@pytest.mark.parametrize("mode", ["nonprivate", "hooks", "ghost"])
def test_the_dpsgd_step_runs_in_every_mode(bench, quick, mode):
    quick.mode = mode
    out = bench.RUN["dpsgd"]("tiny-llama", quick)
    assert out["mode"] == mode and out["tokens_per_s"] > 0


@pytest.mark.fast
def test_the_word_tokenizer_keeps_digits_single_and_labels_distinct(bench):
    from privlm.audit.exposure import digit_tokens
    from privlm.prompting.tasks import get_task, label_token_ids

    tok = bench.WordTokenizer(49152)
    digit_tokens(tok, "My ID is ", 6)  # raises if digits merged or the prefix split
    ids = label_token_ids(get_task("agnews"), tok)
    assert len(set(ids)) == len(ids)
