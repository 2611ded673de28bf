"""PromptDPSGD: per-sample gradients of the prompt parameters against a batch-size-1 loop,
only the prompt trains, the statement meets the target."""

from __future__ import annotations

import json

import pytest
import torch
from opacus import GradSampleModule

from privlm.accounting.advice import suggested_delta
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.prompting.prompt_dpsgd import (
    PromptDpSgdConfig,
    TaskExamples,
    class_logits,
    encode_examples,
    prompt_model,
    train_prompt_dpsgd,
    training_module,
)
from privlm.prompting.tasks import get_task, label_token_ids

TASK = get_task("sst2")


def records(n=30):
    words = ["great", "awful", "fine film", "boring and long", "a delight"]
    return [
        Record(f"{words[i % 5]} {i}", f"r{i}", "positive" if i % 2 else "negative")
        for i in range(n)
    ]


@pytest.mark.parametrize("kind", ["soft-prompt", "prefix"])
def test_per_sample_gradients_of_the_prompt_equal_a_batch_size_one_loop(kind):
    lm = load_public_model("tiny")
    model = prompt_model(lm, kind, 4, seed=0)
    ids, mask, last, classes = encode_examples(lm, TASK, records(3), 32)
    label_ids = label_token_ids(TASK, lm.tokenizer)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert params and all("prompt_encoder" in n for n, _ in params)
    gsm = GradSampleModule(training_module(model, kind))
    loss = torch.nn.functional.cross_entropy(class_logits(gsm, ids, mask, last, label_ids), classes)
    loss.backward()
    batched = {n: p.grad_sample.clone() for n, p in params}
    gsm._close()
    for i in range(len(ids)):
        model.zero_grad(set_to_none=True)
        sl = slice(i, i + 1)
        one = torch.nn.functional.cross_entropy(
            class_logits(model, ids[sl], mask[sl], last[sl], label_ids), classes[sl]
        )
        one.backward()
        for n, p in params:
            assert torch.allclose(batched[n][i], p.grad, atol=1e-6, rtol=1e-4), n


@pytest.mark.parametrize("kind", ["soft-prompt", "prefix"])
def test_only_the_prompt_trains_and_the_target_is_met(tmp_path, kind):
    base = {k: v.clone() for k, v in load_public_model("tiny").model.state_dict().items()}
    cfg = PromptDpSgdConfig(
        kind=kind, virtual_tokens=4, target_epsilon=3.0, batch_size=10, physical_batch_size=5
    )
    st = train_prompt_dpsgd(
        "tiny", TaskExamples(TASK, records()), tmp_path / kind, cfg, progress=False
    )
    assert st.epsilon <= 3.0 and st.delta == suggested_delta(30) == 1e-6 and st.kind == kind
    saved = json.loads((tmp_path / kind / "privacy.json").read_text())
    assert saved["epsilon"] == st.epsilon and saved["task"] == "sst2"
    after = load_public_model("tiny").model.state_dict()
    for k, v in base.items():
        assert torch.equal(after[k], v), k


def test_non_private_baseline_has_no_epsilon(tmp_path):
    cfg = PromptDpSgdConfig(virtual_tokens=4, noise="none", batch_size=10, epochs=1)
    st = train_prompt_dpsgd(
        "tiny", TaskExamples(TASK, records()), tmp_path / "np", cfg, progress=False
    )
    assert st.epsilon is None and st.noise_multiplier is None


@pytest.mark.fast
def test_config_errors():
    with pytest.raises(PrivlmError, match="kind must be one of"):
        PromptDpSgdConfig(kind="lora")


def test_pefts_own_soft_prompt_forward_would_give_wrong_per_sample_gradients():
    """Why BatchedSoftPrompt exists: PEFT embeds the prompt for one row and repeats it."""
    lm = load_public_model("tiny")
    model = prompt_model(lm, "soft-prompt", 4, seed=0)
    ids, mask, last, classes = encode_examples(lm, TASK, records(3), 32)
    label_ids = label_token_ids(TASK, lm.tokenizer)
    (p,) = [p for p in model.parameters() if p.requires_grad]
    gsm = GradSampleModule(model)
    torch.nn.functional.cross_entropy(
        class_logits(gsm, ids, mask, last, label_ids), classes
    ).backward()
    wrong = p.grad_sample.clone()
    gsm._close()
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(
        class_logits(model, ids[:1], mask[:1], last[:1], label_ids), classes[:1]
    ).backward()
    assert wrong.shape[0] != 3 or not torch.allclose(wrong[0], p.grad, atol=1e-6, rtol=1e-4)


def test_the_ledger_refuses_before_training_and_is_charged_before_the_prompt_is_written(tmp_path):
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.errors import BudgetExceededError

    cfg = PromptDpSgdConfig(virtual_tokens=3, target_epsilon=3.0, batch_size=10, epochs=1)
    small = PrivacyLedger(tmp_path / "l.db", "small", Budget(1.0, 1e-6))
    with pytest.raises(BudgetExceededError, match="refused before training"):
        train_prompt_dpsgd(
            "tiny",
            TaskExamples(TASK, records()),
            tmp_path / "no",
            cfg,
            ledger=small,
            progress=False,
        )
    assert not (tmp_path / "no").exists() and small.count() == 0
    enough = PrivacyLedger(tmp_path / "l.db", "enough", Budget(3.0, 1e-6))
    st = train_prompt_dpsgd(
        "tiny", TaskExamples(TASK, records()), tmp_path / "yes", cfg, ledger=enough, progress=False
    )
    assert enough.count() == 1 and enough.spent().epsilon == pytest.approx(st.epsilon, rel=1e-6)


def test_the_prefix_starts_at_zero_and_the_soft_prompt_does_not():
    """Zero prefix keys and values leave the model nearly intact at the start (PEFT's
    N(0, 1) prefix swamps it); the init is data-independent."""
    from privlm.models import load_public_model
    from privlm.prompting.prompt_dpsgd import prompt_model

    lm = load_public_model("tiny")
    prefix = [p for p in prompt_model(lm, "prefix", 4, 0).parameters() if p.requires_grad]
    assert prefix and all(not p.any() for p in prefix)
    lm = load_public_model("tiny")
    soft = [p for p in prompt_model(lm, "soft-prompt", 4, 0).parameters() if p.requires_grad]
    assert any(p.any() for p in soft)


def test_noise_is_fresh_unless_seeded_and_a_seed_says_so(tmp_path):
    """For PromptDPSGD: no default seed decides the noise or the batches."""
    from safetensors.torch import load_file

    from privlm.randomness import SEEDED_WARNING

    def run(name, seed):
        cfg = PromptDpSgdConfig(
            virtual_tokens=3, target_epsilon=8.0, batch_size=10, epochs=1, seed=seed
        )
        st = train_prompt_dpsgd(
            "tiny", TaskExamples(TASK, records()), tmp_path / name, cfg, progress=False
        )
        return st, load_file(str(tmp_path / name / "adapter_model.safetensors"))

    (s1, a), (_, b) = run("a", None), run("b", None)
    assert any(not torch.equal(a[k], b[k]) for k in a) and s1.warning is None
    (s3, c), (_, d) = run("c", 5), run("d", 5)
    assert all(torch.equal(c[k], d[k]) for k in c)
    assert s3.warning == SEEDED_WARNING
    assert json.loads((tmp_path / "c" / "privacy.json").read_text())["warning"] == SEEDED_WARNING


def test_prompt_dpsgd_on_a_bf16_model(tmp_path):
    """The frozen model in bfloat16 (a GPU's default), here on the CPU. The prompt
    parameters, their per-sample gradients and the noise stay float32, the statement
    records the placement, and the adapter serves from a bf16 model."""
    from safetensors.torch import load_file

    from privlm.prompting.serving import prompt_adapter_accuracy

    cfg = PromptDpSgdConfig(
        virtual_tokens=4, batch_size=8, epochs=1, target_epsilon=4.0, device="cpu", dtype="bf16"
    )
    st = train_prompt_dpsgd(
        "tiny", TaskExamples(TASK, records(24)), tmp_path / "p", cfg, progress=False
    )
    assert st.epsilon <= 4.0 and (st.device, st.dtype) == ("cpu", "bfloat16")
    saved = json.loads((tmp_path / "p" / "privacy.json").read_text())
    assert saved["dtype"] == "bfloat16"
    weights = load_file(str(tmp_path / "p" / "adapter_model.safetensors"))
    assert {w.dtype for w in weights.values()} == {torch.float32}
    acc = prompt_adapter_accuracy("tiny", tmp_path / "p", TASK, records(6), dtype="bfloat16")
    assert 0.0 <= acc <= 1.0


@pytest.mark.parametrize("kind", ["soft-prompt", "prefix"])
def test_secure_mode_trains_from_the_os_csprng_only_and_says_so(tmp_path, monkeypatch, kind):
    """For PromptDPSGD: noise and Poisson coins from os.urandom; no torch
    generator is ever asked for, two runs differ, and the statement names the mode."""
    from safetensors.torch import load_file

    import privlm.prompting.prompt_dpsgd as module
    from privlm.training.secure_noise import SECURE_STATEMENT

    def no_prng(*args, **kwargs):
        raise AssertionError("secure mode drew from a torch generator")

    monkeypatch.setattr(module.PrivacyRandomness, "torch_generator", no_prng)
    cfg = PromptDpSgdConfig(
        kind=kind, virtual_tokens=3, target_epsilon=8.0, batch_size=10, epochs=1, secure_mode=True
    )
    st = train_prompt_dpsgd(
        "tiny", TaskExamples(TASK, records()), tmp_path / "a", cfg, progress=False
    )
    train_prompt_dpsgd("tiny", TaskExamples(TASK, records()), tmp_path / "b", cfg, progress=False)
    assert st.randomness == SECURE_STATEMENT["randomness"] and st.epsilon <= 8.0
    a = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "b" / "adapter_model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a)
    saved = json.loads((tmp_path / "a" / "privacy.json").read_text())
    assert saved["randomness"].startswith("secure mode")


@pytest.mark.fast
def test_secure_mode_is_neither_seeded_nor_non_private():
    with pytest.raises(PrivlmError, match="cannot be seeded"):
        PromptDpSgdConfig(secure_mode=True, seed=1)
    with pytest.raises(PrivlmError, match="private training"):
        PromptDpSgdConfig(secure_mode=True, noise="none")


def test_a_non_finite_loss_stops_training_and_nothing_is_written(tmp_path, monkeypatch):
    """PromptDPSGD trains through DP-SGD's one step loop, so it refuses a NaN loss as
    LoRA's DP-SGD does (privlm.training.dp_loop)."""
    import privlm.prompting.prompt_dpsgd as module

    real = module.class_loss

    def nan_loss(label_ids):
        loss = real(label_ids)
        return lambda model, batch: loss(model, batch) * float("nan")

    monkeypatch.setattr(module, "class_loss", nan_loss)
    cfg = PromptDpSgdConfig(virtual_tokens=3, target_epsilon=3.0, batch_size=10, epochs=1)
    with pytest.raises(PrivlmError, match="not finite"):
        train_prompt_dpsgd(
            "tiny", TaskExamples(TASK, records()), tmp_path / "p", cfg, progress=False
        )
    assert not (tmp_path / "p").exists()


@pytest.mark.fast
def test_a_fixed_sigma_plans_and_charges_as_lora_dpsgd_does():
    """One cost function: PromptDPSGD's plan is DP-SGD's (q, steps, δ, σ, ε, charge)."""
    from privlm.prompting.prompt_dpsgd import PromptRun
    from privlm.training.dpsgd import DpSgdRun

    cfg = PromptDpSgdConfig(noise="noise-multiplier", noise_multiplier=1.2, batch_size=10)
    planned = PromptRun.plan(TaskExamples(TASK, records()), cfg)
    assert planned.run == DpSgdRun.plan(30, cfg)
    assert (planned.run.sample_rate, planned.run.steps) == (1 / 3, 6)
    charge = planned.charge(cfg)
    assert charge.params["noise_multiplier"] == 1.2 and charge.unit == planned.unit == "user"
    none = PromptRun.plan(TaskExamples(TASK, records()), PromptDpSgdConfig(noise="none"))
    assert not none.run.private
