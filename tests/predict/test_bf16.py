"""bf16 model outputs through PMixED and SubMix: the privacy math upcasts to
float64, so the charged cost still bounds the exact divergence between neighbouring
ensembles, computed on the distributions a bf16 model actually produces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import pmixed as pm
from privlm.models import load_public_model
from privlm.predict import PMixED, PMixEDConfig
from privlm.predict.engine import EnsembleEngine
from privlm.predict.submix_rule import submix_step
from tests.predict.exact import pmixed_poisson_output, submix_output, sym

CONTEXT = [504, 1723, 314, 260]


@pytest.fixture(scope="module")
def bf16_engine(adapter_dirs):
    lm = load_public_model("tiny", device="cpu", dtype="bfloat16")
    return EnsembleEngine.from_directories(lm.model, adapter_dirs), lm.tokenizer


def test_bf16_log_probs_are_float64_and_close_to_float32(bf16_engine, engine):
    low, _ = bf16_engine
    full, _ = engine
    rows = [-1, 0, 1, 2, 3]
    lp16, lp32 = low.log_probs(CONTEXT, rows), full.log_probs(CONTEXT, rows)
    assert lp16.dtype == lp32.dtype == torch.float64
    torch.testing.assert_close(lp16.exp().sum(-1), torch.ones(5, dtype=torch.float64))
    assert (lp16.exp() - lp32.exp()).abs().max() < 0.02  # bf16 weights: ~3 digits


@pytest.mark.parametrize("q", [1.0, 0.5])
def test_pmixed_charged_cost_bounds_the_exact_divergence_on_bf16_outputs(bf16_engine, q):
    low, _ = bf16_engine
    lp = low.log_probs(CONTEXT, [-1, 0, 1, 2, 3]).numpy()
    probs = np.exp(lp)
    probs /= probs.sum(-1, keepdims=True)
    p0, models = probs[0], list(probs[1:])
    alpha, eps = 3, 0.2
    radius = pm.solve_radius(eps, alpha, len(models), q)
    charged = pm.query_rdp(radius, alpha, len(models), q)
    full = pmixed_poisson_output(models, p0, alpha, radius, q)
    for i in range(len(models)):
        without = pmixed_poisson_output(models[:i] + models[i + 1 :], p0, alpha, radius, q)
        assert sym(full, without, alpha) <= charged * (1 + 1e-9)


def test_submix_leakage_bounds_the_exact_divergence_on_bf16_outputs(bf16_engine):
    low, _ = bf16_engine
    lp = low.log_probs(CONTEXT, [-1, 0, 1, 2, 3])
    out = submix_step(lp[1::2], lp[2::2], lp[0], 2.0, 0.05, tol=1e-13)
    probs = lp.exp().numpy()
    parts = [(probs[1], probs[2]), (probs[3], probs[4])]
    released = out.log_probs.exp().numpy()
    for i in range(2):
        without = submix_output(parts[:i] + parts[i + 1 :], probs[0], 2.0, 0.05)
        assert float(out.leakage[i]) >= sym(released, without, 2.0) * (1 - 1e-9) - 1e-15


def test_pmixed_generates_and_charges_from_a_bf16_model(bf16_engine, tmp_path):
    low, tok = bf16_engine
    cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=16, sample_rate=0.5)
    ledger = PrivacyLedger(tmp_path / "l.db", "bf16", Budget(8.0, 1e-5))
    gen = PMixED(low, tok, ledger, cfg).generate("Hello", max_new_tokens=4)
    assert 1 <= len(gen.token_ids) <= 4 and ledger.count() == len(gen.token_ids)
