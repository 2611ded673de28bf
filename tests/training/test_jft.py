"""Just Fine-tune Twice: each phase-1 mode, its accounting against Opacus's RDP analysis
computed independently, the phase-2 initialisation, fail-closed ledgers, masked DP-SGD."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file as load_safetensors

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.data import Dataset, Record
from privlm.detect import Span, make_detector
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.models import load_public_model
from privlm.training.dpsgd import DpSgdConfig
from privlm.training.jft import JftConfig, composed_epsilon, train_jft
from privlm.training.lora_finetune import LoraTrainingConfig
from privlm.training.lora_targets import discover_lora_targets
from privlm.training.redaction import (
    embed_with_masks,
    mask_embedding,
    masked_lm_loss,
    redacted_sequences,
)

NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank"]


def dataset(n=40):
    recs = [
        Record(f"{NAMES[i % 6]} paid invoice {1000 + i} on time", f"r{i}", line=i) for i in range(n)
    ]
    return Dataset(recs, "mem", "record")


def small(**kw):
    base = dict(batch_size=10, physical_batch_size=5, epochs=1, block_size=16, learning_rate=5e-3)
    return DpSgdConfig(**{**base, **kw})


def cfg(**kw):
    return JftConfig(
        detector="regex",
        phase1_training=LoraTrainingConfig(epochs=1, pack=False, block_size=16, batch_size=8),
        phase1_dpsgd=small(target_epsilon=2.0),
        phase2=small(target_epsilon=3.0),
        **kw,
    )


def opacus_epsilon(runs, delta):
    """Opacus's RDP analysis on privlm's order grid: an independent computation."""
    orders = list(DEFAULT_ORDERS)
    rdp = sum(compute_rdp(q=q, noise_multiplier=s, steps=n, orders=orders) for s, q, n in runs)
    return get_privacy_spent(orders=orders, rdp=rdp, delta=delta)[0]


def annotated(path, n=20):
    # names are sensitive too, but the regex detector only catches the numbers
    with open(path, "w") as f:
        for i in range(n):
            text = f"{NAMES[i % 6]} paid invoice {2000 + i} today"
            secrets = [NAMES[i % 6]] if i % 3 else []
            f.write(json.dumps({"text": text, "secrets": [*secrets, str(2000 + i)]}) + "\n")
    return path


def lora_b(adapter_dir):
    w = load_safetensors(str(adapter_dir / "adapter_model.safetensors"))
    return {k: v for k, v in w.items() if "lora_B" in k}


def test_direct_mode_is_sdp_at_phase_twos_epsilon(tmp_path):
    st = train_jft(
        "tiny", dataset(), tmp_path / "m", cfg(), phase1_dir=tmp_path / "m-phase1", progress=False
    )
    p2 = st.phase2
    assert st.phase1_mode == "direct" and st.policy == "regex"
    assert st.epsilon == p2["epsilon"] <= 3.0
    assert st.epsilon == pytest.approx(
        opacus_epsilon([(p2["noise_multiplier"], p2["sample_rate"], p2["steps"])], st.delta),
        rel=1e-6,
    )
    assert st.dp_epsilon is None and st.epsilon_range is None
    assert 0 < st.phase1["redacted_token_fraction"] < 0.5
    assert "assumes a perfect detector without measuring it" in st.assumption
    saved = json.loads((tmp_path / "m" / "sdp.json").read_text())
    assert saved["epsilon"] == st.epsilon and "SDP" in saved["guarantee"]
    assert (tmp_path / "m-phase1" / "adapter_config.json").is_file()
    card = (tmp_path / "m-phase1" / "README.md").read_text()  # phase 1's card
    assert "**Guarantee:** none" in card and "policy 'regex'" in card and "Do not" in card
    privacy = json.loads((tmp_path / "m" / "privacy.json").read_text())
    assert privacy["init_adapter"] == "JFT phase 1: kept by the curator, not released"
    assert str(tmp_path) not in json.dumps(privacy) + json.dumps(saved)  # no local path
    # the policy's detector: its name, version and whether it was measured on held-out text
    assert privacy["detector"]["name"] == "regex" and "privlm" in privacy["detector"]["version"]
    assert privacy["detector"]["heldout_recall"] is None  # regex alone was never benchmarked
    assert "Policy's detector:** regex" in (tmp_path / "m" / "README.md").read_text()


def test_phase_two_starts_from_phase_one(tmp_path):
    c = cfg()
    c.phase2 = small(target_epsilon=3.0, learning_rate=1e-9)
    train_jft(
        "tiny", dataset(), tmp_path / "m", c, phase1_dir=tmp_path / "m-phase1", progress=False
    )
    b1, b2 = lora_b(tmp_path / "m-phase1"), lora_b(tmp_path / "m")
    assert any(v.abs().max() > 0 for v in b1.values())  # a fresh adapter has B = 0
    for k in b1:
        assert torch.allclose(b1[k], b2[k], atol=1e-6), k


def test_screened_mode_trains_phase_one_on_the_sanitised_file(tmp_path):
    screened = tmp_path / "clean.txt"
    screened.write_text("<mask> paid invoice <mask> on time\n" * 6)
    st = train_jft(
        "tiny", dataset(), tmp_path / "m", cfg(phase1="screened", screened_file=screened),
        progress=False,
    )  # fmt: skip
    assert st.policy == "manual screening" and st.phase1["screened_records"] == 6
    assert st.epsilon == st.phase2["epsilon"] <= 3.0


def test_light_noise_accounts_at_q_times_the_miss_rate(tmp_path):
    c = cfg(phase1="light-noise", annotated_file=annotated(tmp_path / "a.jsonl"))
    st = train_jft("tiny", dataset(), tmp_path / "m", c, progress=False)
    p1, p2 = st.phase1, st.phase2
    miss = p1["miss_rate"]
    assert 0 <= miss["low"] < miss["mean"] < miss["high"] < 1
    s1, q1, n1 = p1["noise_multiplier"], p1["sample_rate"], p1["steps"]
    # phase 1 meets its target at the upper end, and both ends match Opacus at q·m̃
    assert p1["epsilon_high"] <= 2.0
    assert p1["epsilon_high"] == pytest.approx(
        opacus_epsilon([(s1, q1 * miss["high"], n1)], st.delta), rel=1e-6
    )
    expect_lo = 0.0 if miss["low"] == 0 else opacus_epsilon([(s1, q1 * miss["low"], n1)], st.delta)
    assert p1["epsilon_low"] == pytest.approx(expect_lo, rel=1e-6)
    # the SDP estimate composes both phases; the ordinary DP ε accounts phase 1 at q
    run2 = (p2["noise_multiplier"], p2["sample_rate"], p2["steps"])
    lo, hi = st.epsilon_range
    assert (
        hi
        == st.epsilon
        == pytest.approx(opacus_epsilon([(s1, q1 * miss["high"], n1), run2], st.delta), rel=1e-6)
    )
    assert lo <= hi < st.dp_epsilon
    assert st.dp_epsilon == pytest.approx(opacus_epsilon([(s1, q1, n1), run2], st.delta), rel=1e-6)
    assert p1["statement"]["accounted_sample_rate"] == pytest.approx(q1 * miss["high"])
    assert "estimate" in st.assumption


def test_direct_mode_states_the_miss_rate_an_annotated_sample_measures(tmp_path):
    """The regex detector misses the names; the statement says how many, counted
    here independently, and that the SDP assumption does not hold."""
    path = annotated(tmp_path / "a.jsonl")
    st = train_jft("tiny", dataset(), tmp_path / "m", cfg(annotated_file=path), progress=False)
    measured = st.phase1["measured_miss_rate"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    names = sum(1 for r in rows for s in r["secrets"] if s in NAMES)
    assert (measured["missed_tokens"], measured["sensitive_tokens"]) == (names, len(rows) + names)
    assert f"missed {names} of {len(rows) + names} sensitive tokens" in st.assumption
    assert "does not hold" in st.assumption and "light-noise" in st.assumption
    assert st.epsilon == st.phase2["epsilon"]  # measured, stated, not used in the accounting


@pytest.mark.fast
def test_light_noise_needs_a_detector_that_misses_something(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"code {i}", "secrets": [str(i)]}) + "\n" for i in range(20))
    )
    c = cfg(phase1="light-noise", annotated_file=path)
    with pytest.raises(PrivlmError, match="missed no sensitive token"):
        train_jft("tiny", dataset(), tmp_path / "m", c, progress=False)


@pytest.mark.fast
def test_mode_errors():
    with pytest.raises(PrivlmError, match="phase1 must be one of"):
        JftConfig(phase1="twice")
    with pytest.raises(PrivlmError, match="--screened"):
        JftConfig(phase1="screened")
    with pytest.raises(PrivlmError, match="--annotated"):
        JftConfig(phase1="light-noise")


@pytest.mark.fast
def test_a_run_over_the_ledger_is_refused_before_any_training(tmp_path):
    led = PrivacyLedger(tmp_path / "l.db", "jft", Budget(1.0, 1e-5))
    with pytest.raises(BudgetExceededError, match="refused before training"):
        train_jft("tiny", dataset(), tmp_path / "m", cfg(), ledger=led, progress=False)
    assert not (tmp_path / "m-phase1").exists() and not (tmp_path / "m").exists()
    assert led.count() == 0


def test_both_light_noise_phases_are_charged(tmp_path):
    led = PrivacyLedger(tmp_path / "l.db", "jft", Budget(50.0, 1e-3))
    c = cfg(phase1="light-noise", annotated_file=annotated(tmp_path / "a.jsonl"))
    c.phase2 = small(target_epsilon=3.0, delta=1e-3)
    st = train_jft("tiny", dataset(), tmp_path / "m", c, ledger=led, progress=False)
    assert led.count() == 2
    assert led.spent().epsilon == pytest.approx(st.epsilon, rel=1e-6)


@pytest.mark.fast
def test_composed_epsilon_of_nothing_is_zero():
    assert composed_epsilon([(1.0, 0.0, 10)], 1e-5) == 0.0
    assert np.isfinite(composed_epsilon([(1.0, 0.1, 10)], 1e-5))


def test_masked_per_sample_gradients_equal_a_batch_size_one_loop():
    lm = load_public_model("tiny")
    torch.manual_seed(0)
    model = get_peft_model(
        lm.model,
        LoraConfig(r=4, lora_alpha=32, target_modules=discover_lora_targets(lm.model),
                   init_lora_weights=False),
    )  # fmt: skip
    texts = ["Alice paid 12 dollars", "then Bob left", "nothing here at all"]
    spans = make_detector("regex").detect(texts)
    spans[0] = [*spans[0], Span(0, 5, "NAME")]
    enc = redacted_sequences(lm.tokenizer, texts, spans, 16)
    assert enc.masked.any()
    vec = mask_embedding(lm.model, lm.tokenizer)
    attention = ((enc.labels != -100) | enc.masked).long()
    gsm = GradSampleModule(model)
    emb = embed_with_masks(model, enc.ids, enc.masked, vec)
    masked_lm_loss(
        gsm(inputs_embeds=emb, attention_mask=attention).logits, enc.labels, True
    ).backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    batched = {n: p.grad_sample.clone() for n, p in params}
    gsm._close()
    for i in range(len(texts)):
        model.zero_grad(set_to_none=True)
        sl = slice(i, i + 1)
        emb = embed_with_masks(model, enc.ids[sl], enc.masked[sl], vec)
        out = model(inputs_embeds=emb, attention_mask=attention[sl]).logits
        masked_lm_loss(out, enc.labels[sl], True).backward()
        for n, p in params:
            assert torch.allclose(batched[n][i], p.grad, atol=1e-6, rtol=1e-4), n


def test_the_non_private_phase1_adapter_is_kept_only_when_asked_for(tmp_path):
    train_jft("tiny", dataset(), tmp_path / "m", cfg(), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "m.curator.json"]  # no phase 1


@pytest.mark.parametrize("mode", ["direct", "light-noise"])
def test_the_phase_one_users_get_is_built_from_phase_two(tmp_path, mode):
    """No phase-1 config given whole (as the CLI, the service and a plain JftConfig run):
    phase 1 is JftConfig.phase1_lora() (direct) or phase1_dp() (light noise), from phase 2's
    adapter shape and block size with phase 1's own epochs, learning rate and ε."""
    extra = {"annotated_file": annotated(tmp_path / "a.jsonl")} if mode == "light-noise" else {}
    c = JftConfig(
        detector="regex", phase1=mode, phase1_epochs=1, phase1_learning_rate=1e-3,
        phase1_epsilon=2.5, phase2=small(target_epsilon=3.0, rank=2), **extra,
    )  # fmt: skip
    st = train_jft("tiny", dataset(), tmp_path / "m", c, phase1_dir=tmp_path / "p1", progress=False)
    if mode == "direct":
        want = c.phase1_lora()
        assert (want.rank, want.block_size, want.pack, want.epochs) == (2, 16, False, 1)
        assert st.phase1["training"]["steps"] == 40 // 5  # one record a sequence, 5 a batch
        config = json.loads((tmp_path / "p1" / "adapter_config.json").read_text())
        assert config["r"] == 2
    else:
        p1 = st.phase1
        assert (
            p1["epsilon_high"] <= 2.5
            and p1["statement"]["accounted_sample_rate"] < (p1["sample_rate"])
        )
        assert c.phase1_dp().target_epsilon == 2.5 and c.phase1_dp().rank == 2
    assert st.epsilon <= 3.0 + (2.5 if mode == "light-noise" else 0.0)
    assert json.loads((tmp_path / "m" / "adapter_config.json").read_text())["r"] == 2
