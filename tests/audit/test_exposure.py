"""Canary exposure: the prefix-tree scores equal brute-force scoring of every candidate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privlm.audit.exposure import (
    DEFAULT_PREFIX,
    candidate_log_likelihoods,
    exposure_from_scores,
    insert_canary,
    measure_exposure,
)
from privlm.data import Dataset, Record
from privlm.models import load_public_model
from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora


def brute_force(model, tokenizer, n_digits, chunk=250):
    """Every candidate as its own full sequence, scored token by token (the vocabulary's
    log-softmax only where a digit is predicted, a chunk of candidates at a time)."""
    seqs = [
        tokenizer(DEFAULT_PREFIX + str(i).zfill(n_digits), add_special_tokens=False)["input_ids"]
        for i in range(10**n_digits)
    ]
    ids = torch.tensor(seqs)
    n_prefix = ids.shape[1] - n_digits
    scores = []
    with torch.no_grad():
        for part in ids.split(chunk):
            logits = model(input_ids=part).logits[:, n_prefix - 1 : -1]
            logp = torch.log_softmax(logits.double(), -1)
            picked = logp.gather(2, part[:, n_prefix:, None]).squeeze(-1)
            scores.append(picked.sum(1))
    return torch.cat(scores).numpy()


@pytest.fixture(scope="module")
def tiny_brute_force(tiny):
    return brute_force(tiny.model, tiny.tokenizer, 3)


@pytest.mark.parametrize("max_rows", [10_000, 10])  # one batch per level, or split subtrees
def test_tree_scores_equal_brute_force(tiny, tiny_brute_force, max_rows):
    tree = candidate_log_likelihoods(
        tiny.model, tiny.tokenizer, 3, max_rows=max_rows, progress=False
    )
    exact = tiny_brute_force
    np.testing.assert_allclose(tree, exact, rtol=0, atol=2e-5)
    for canary in ("000", "417", "999"):
        assert exposure_from_scores(tree, canary).rank == exposure_from_scores(exact, canary).rank


def test_the_tree_on_a_bf16_model_scores_its_own_distribution():
    """On a bf16 model (a GPU's default) the tree still equals brute force over
    that model's outputs; bf16 weights move the scores only a little from float32's."""
    from privlm.models import load_public_model

    low = load_public_model("tiny", device="cpu", dtype="bfloat16")
    # two digits: a CPU without bf16 instructions emulates every product (subtrees are still
    # split, max_rows 10 against 100 candidates)
    tree = candidate_log_likelihoods(low.model, low.tokenizer, 2, max_rows=10, progress=False)
    np.testing.assert_allclose(tree, brute_force(low.model, low.tokenizer, 2), atol=0.05)
    full = load_public_model("tiny", device="cpu")
    ref = candidate_log_likelihoods(full.model, full.tokenizer, 2, progress=False)
    assert np.corrcoef(tree, ref)[0, 1] > 0.99


@pytest.mark.fast
def test_rank_and_exposure_definition():
    scores = np.array([-1.0, -3.0, -2.0, -2.0, -0.5])
    e = exposure_from_scores(scores, "2")  # candidates 0 and 4 are strictly more likely
    assert (e.rank, e.candidates) == (3, 5)
    assert e.exposure == pytest.approx(math.log2(5) - math.log2(3))
    assert exposure_from_scores(scores, "4").exposure == pytest.approx(math.log2(5))


@pytest.mark.fast
def test_insert_canary():
    ds = Dataset([Record(f"r{i}", f"record-{i}") for i in range(10)], "mem")
    out = insert_canary(ds, "123456", 3, seed=1)
    assert len(out) == 13 and sum(r.text == "My ID is 123456" for r in out) == 3
    assert len(out.units()) == 13  # each copy is its own record


def test_memorising_the_canary_raises_exposure(tmp_path):
    lm = load_public_model("tiny")
    before = measure_exposure(lm.model, lm.tokenizer, "417", progress=False)
    texts = [DEFAULT_PREFIX + "417"] * 8
    cfg = LoraTrainingConfig(
        rank=8, epochs=40, learning_rate=2e-2, batch_size=8, block_size=16, pack=False
    )
    finetune_lora("tiny", texts, cfg, tmp_path / "a", progress=False)
    from peft import PeftModel

    trained = PeftModel.from_pretrained(load_public_model("tiny").model, tmp_path / "a").eval()
    after = measure_exposure(trained, lm.tokenizer, "417", progress=False)
    assert after.rank == 1 and after.exposure == pytest.approx(math.log2(1000))
    assert before.exposure < after.exposure - 3


def test_cli():
    import json

    from typer.testing import CliRunner

    from privlm.cli import app

    res = CliRunner().invoke(
        app,
        ["audit", "exposure", "--canary", "042", "--model", "tiny", "--json", "--device", "cpu"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["candidates"] == 1000 and 1 <= out["rank"] <= 1000
    assert (out["device"], out["dtype"]) == ("cpu", "float32")
    bad = CliRunner().invoke(app, ["audit", "exposure", "--canary", "12a", "--model", "tiny"])
    assert bad.exit_code == 2 and "must be digits" in bad.stderr


@pytest.mark.fast
def test_random_canary():
    from privlm.audit.exposure import random_canary

    assert random_canary(6, seed=0) == random_canary(6, seed=0)
    assert len(random_canary(6)) == 6 and random_canary(6).isdigit()


def test_a_patterned_canary_is_refused_before_any_model_loads():
    from typer.testing import CliRunner

    from privlm.audit.exposure import patterned, random_canary
    from privlm.cli import app

    assert all(patterned(c) for c in ("123456", "654321", "111111", "121212", "975319"))
    assert not any(patterned(c) for c in ("703518", "280914", "95"))
    draws = [random_canary(6) for _ in range(200)]
    assert sum(patterned(c) for c in draws) <= 2  # about 0.01 % of random canaries
    res = CliRunner().invoke(app, ["audit", "exposure", "--canary", "123456", "--model", "nope"])
    assert res.exit_code == 2 and "is a pattern the public model already ranks" in res.output
