"""DP-SGD on LoRA: per-sample gradients, calibration, no silent failure, the statement."""

from __future__ import annotations

import json

import pytest
import torch
from opacus import GradSampleModule
from peft import LoraConfig, get_peft_model

from privlm.accounting import dpsgd_epsilon
from privlm.accounting.ledger import ledger_names
from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.randomness import SEEDED_WARNING, PrivacyRandomness
from privlm.training import dpsgd as dp
from privlm.training.lora_finetune import record_sequences
from privlm.training.lora_targets import discover_lora_targets
from privlm.training.redaction import masked_lm_loss

CFG = dict(batch_size=16, physical_batch_size=4, epochs=2, block_size=24, learning_rate=1e-2)


def dataset(n=48, users=None):
    recs = [
        Record(
            f"record {i} says the value is {i * 7 % 13}",
            f"user-{i % users}" if users else f"record-{i}",
            line=i,
        )
        for i in range(n)
    ]
    return Dataset(recs, "mem", "user" if users else "record")


def peft_tiny():
    lm = load_public_model("tiny")
    torch.manual_seed(0)
    cfg = LoraConfig(
        r=4, lora_alpha=32, target_modules=discover_lora_targets(lm.model), init_lora_weights=False
    )
    return lm, get_peft_model(lm.model, cfg)


def test_per_sample_gradients_equal_a_batch_size_one_loop():
    lm, model = peft_tiny()
    ids, labels = record_sequences(
        lm.tokenizer, ["a short one", "a somewhat longer example here", "x y z w"], 16
    )
    gsm = GradSampleModule(model)
    loss = masked_lm_loss(
        gsm(input_ids=ids, attention_mask=(labels != -100).long()).logits, labels, per_example=True
    )
    loss.backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    batched = {n: p.grad_sample.clone() for n, p in params}
    gsm._close()
    for i in range(len(ids)):
        model.zero_grad(set_to_none=True)
        one = masked_lm_loss(
            model(
                input_ids=ids[i : i + 1], attention_mask=(labels[i : i + 1] != -100).long()
            ).logits,
            labels[i : i + 1],
            per_example=True,
        )
        one.backward()
        for n, p in params:
            assert torch.allclose(batched[n][i], p.grad, atol=1e-6, rtol=1e-4), n


def test_training_meets_the_target_and_moves_only_lora(tmp_path):
    base = {k: v.clone() for k, v in load_public_model("tiny").model.state_dict().items()}
    st = dp.train_dpsgd(
        "tiny", dataset(), tmp_path / "a", dp.DpSgdConfig(target_epsilon=3.0, **CFG), progress=False
    )
    assert st.epsilon <= 3.0 and st.unit == "record" and st.units == 48
    again = dpsgd_epsilon(st.noise_multiplier, st.sample_rate, st.steps, st.delta, "rdp")
    assert again.epsilon == st.epsilon
    assert st.delta == 1e-6  # min(1/n^1.1, 1e-6): strong, never the weak-δ warning
    assert st.delta_warning is None
    assert st.sample_rate == pytest.approx(1 / 3) and st.steps == 6
    saved = json.loads((tmp_path / "a" / "privacy.json").read_text())
    assert saved["epsilon"] == st.epsilon and saved["noise_multiplier"] == st.noise_multiplier
    from peft import PeftModel

    trained = PeftModel.from_pretrained(load_public_model("tiny").model, tmp_path / "a")
    merged_base = {
        k.removeprefix("base_model.model."): v
        for k, v in trained.state_dict().items()
        if "lora" not in k
    }
    for k, v in base.items():  # the public weights never change
        key = (
            k.replace(".weight", ".base_layer.weight")
            if f"{k.rsplit('.', 1)[0]}.base_layer.weight" in merged_base
            else k
        )
        assert torch.equal(merged_base[key], v), k


def test_user_level_unit_clips_each_user_jointly(tmp_path):
    st = dp.train_dpsgd(
        "tiny",
        dataset(48, users=12),
        tmp_path / "u",
        dp.DpSgdConfig(target_epsilon=5.0, **CFG),
        progress=False,
    )
    assert st.unit == "user" and st.units == 12


def test_a_parameter_without_per_sample_gradients_stops_training(tmp_path, monkeypatch):
    from privlm.training import lora_finetune

    real = lora_finetune.get_peft_model

    def with_stray(model, cfg):
        peft_model = real(model, cfg)
        peft_model.stray = torch.nn.Linear(3, 3)  # trainable, never used in forward
        return peft_model

    monkeypatch.setattr(lora_finetune, "get_peft_model", with_stray)
    with pytest.raises(PrivlmError, match="no per-sample gradient"):
        dp.train_dpsgd(
            "tiny",
            dataset(),
            tmp_path / "s",
            dp.DpSgdConfig(target_epsilon=3.0, **CFG),
            progress=False,
        )
    assert not (tmp_path / "s").exists()


@pytest.mark.fast
def test_sigma_or_target_epsilon_is_an_explicit_choice():
    with pytest.raises(PrivlmError, match="noise='noise-multiplier'"):
        dp.DpSgdConfig(noise_multiplier=1.0)  # a σ beside the default target ε: which one?
    with pytest.raises(PrivlmError, match="needs the σ"):
        dp.DpSgdConfig(noise="noise-multiplier")
    with pytest.raises(PrivlmError, match="privlm train lora"):
        dp.DpSgdConfig(noise="none")  # DP-SGD's non-private baseline is the LoRA fine-tune
    fixed = dp.DpSgdRun.plan(
        1000, dp.DpSgdConfig(noise="noise-multiplier", noise_multiplier=1.3, batch_size=100,
                             epochs=3)
    )  # fmt: skip
    assert (fixed.sample_rate, fixed.steps, fixed.noise_multiplier) == (0.1, 30, 1.3)
    assert fixed.delta == 1e-6
    target = dp.DpSgdRun.plan(1000, dp.DpSgdConfig(target_epsilon=2.0, batch_size=100))
    assert target.epsilon("rdp") <= 2.0 < dp.DpSgdRun.plan(
        1000, dp.DpSgdConfig(noise="noise-multiplier", noise_multiplier=target.noise_multiplier
                             * 0.99, batch_size=100)
    ).epsilon("rdp")  # fmt: skip


@pytest.mark.fast
def test_the_cli_reads_a_fixed_sigma_as_that_choice():
    from privlm.cli.common import noise_from_flags

    assert noise_from_flags({"noise": "target-epsilon", "noise_multiplier": 1.1})["noise"] == (
        "noise-multiplier"
    )
    assert noise_from_flags({"noise": "target-epsilon", "noise_multiplier": None})["noise"] == (
        "target-epsilon"
    )


def test_cli(tmp_path):
    from typer.testing import CliRunner

    from privlm.cli import app

    data = tmp_path / "d.txt"
    data.write_text("\n".join(f"line {i} of private notes" for i in range(40)))
    res = CliRunner().invoke(
        app,
        [
            "train",
            "dpsgd",
            str(data),
            "--out",
            str(tmp_path / "o"),
            "--epsilon",
            "4",
            "--model",
            "tiny",
            "--batch-size",
            "10",
            "--physical-batch-size",
            "5",
            "--block-size",
            "16",
            "--json",
            "--ledger",
            str(tmp_path / "ledger.db"),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["epsilon"] <= 4.0 and out["units"] == 40 and out["steps"] == 4


@pytest.mark.fast
def test_a_run_that_does_not_fit_the_ledger_is_refused_before_training(tmp_path, monkeypatch):
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.errors import BudgetExceededError

    ledger = PrivacyLedger(tmp_path / "l.db", "data", Budget(1.0, 1e-6))
    monkeypatch.setattr(dp, "lora_model", lambda *a: pytest.fail("training started"))
    with pytest.raises(BudgetExceededError, match="refused before training"):
        dp.train_dpsgd(
            "tiny",
            dataset(),
            tmp_path / "a",
            dp.DpSgdConfig(target_epsilon=3.0, **CFG),
            progress=False,
            ledger=ledger,
        )
    assert ledger.count() == 0 and not (tmp_path / "a").exists()


def test_the_run_is_charged_before_the_adapter_is_written(tmp_path, monkeypatch):
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.errors import BudgetExceededError

    ledger = PrivacyLedger(tmp_path / "l.db", "data", Budget(3.0, 1e-6))
    st = dp.train_dpsgd(
        "tiny",
        dataset(),
        tmp_path / "a",
        dp.DpSgdConfig(target_epsilon=3.0, **CFG),
        progress=False,
        ledger=ledger,
    )
    [rec] = ledger.charges()
    assert rec.mechanism == "dpsgd" and rec.unit == "record"
    assert ledger.spent().epsilon == pytest.approx(st.epsilon, rel=1e-12)  # same accountant
    # a charge refused at the end (the budget went elsewhere meanwhile): no adapter leaves
    other = PrivacyLedger(tmp_path / "l.db", "other", Budget(3.0, 1e-6))

    def refuse(charge):
        raise BudgetExceededError("refused: spent elsewhere")

    monkeypatch.setattr(other, "charge", refuse)
    with pytest.raises(BudgetExceededError, match="spent elsewhere"):
        dp.train_dpsgd(
            "tiny",
            dataset(),
            tmp_path / "b",
            dp.DpSgdConfig(target_epsilon=3.0, **CFG),
            progress=False,
            ledger=other,
        )
    assert not (tmp_path / "b").exists()


def test_cli_charges_the_ledger_and_refuses_a_second_run(tmp_path):
    from typer.testing import CliRunner

    from privlm.accounting import PrivacyLedger
    from privlm.cli import app

    data = tmp_path / "d.txt"
    data.write_text("\n".join(f"line {i} of private notes" for i in range(40)))
    args = [
        "train",
        "dpsgd",
        str(data),
        "--epsilon",
        "4",
        "--model",
        "tiny",
        "--batch-size",
        "10",
        "--physical-batch-size",
        "5",
        "--block-size",
        "16",
        "--ledger",
        str(tmp_path / "l.db"),
    ]
    first = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o1")])
    assert first.exit_code == 0, first.output
    (name,) = ledger_names(tmp_path / "l.db")  # the data's one ledger
    assert PrivacyLedger(tmp_path / "l.db", name).count() == 1
    second = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o2")])
    assert second.exit_code == 2 and "refused before training" in second.stderr
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("use_ghost", [True, False], ids=["ghost", "fast"])
def test_ghost_and_fast_clipping_equal_clipping_a_batch_size_one_loop(use_ghost):
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

    from privlm.training.redaction import per_example_losses

    lm, model = peft_tiny()
    ids, labels = record_sequences(
        lm.tokenizer, ["a short one", "a somewhat longer example here", "x y z w"], 16
    )
    attention = (labels != -100).long()
    clip = 0.01  # small enough that every example is clipped
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    expected = {n: torch.zeros_like(p) for n, p in params}
    for i in range(len(ids)):
        model.zero_grad(set_to_none=True)
        sl = slice(i, i + 1)
        per_example_losses(
            model(input_ids=ids[sl], attention_mask=attention[sl]).logits, labels[sl]
        ).sum().backward()
        norm = torch.sqrt(sum(p.grad.pow(2).sum() for _, p in params))
        assert norm > clip
        for n, p in params:
            expected[n] += p.grad * (clip / (norm + 1e-6))
    model.zero_grad(set_to_none=True)
    gsm = GradSampleModuleFastGradientClipping(
        model, max_grad_norm=clip, use_ghost_clipping=use_ghost
    )
    opt = DPOptimizerFastGradientClipping(
        torch.optim.SGD([p for _, p in params], lr=0.0),
        noise_multiplier=0.0, max_grad_norm=clip, expected_batch_size=len(ids),
    )  # fmt: skip
    losses = per_example_losses(gsm(input_ids=ids, attention_mask=attention).logits, labels)
    DPTensorFastGradientClipping(gsm, opt, losses, "mean").backward()
    for n, p in params:
        assert torch.allclose(p.grad, expected[n], atol=1e-7, rtol=1e-3), n
    gsm._close()


def test_training_in_ghost_mode(tmp_path):
    st = dp.train_dpsgd(
        "tiny",
        dataset(),
        tmp_path / "g",
        dp.DpSgdConfig(target_epsilon=3.0, grad_sample_mode="ghost", **CFG),
        progress=False,
    )
    assert st.epsilon <= 3.0
    saved = json.loads((tmp_path / "g" / "privacy.json").read_text())
    assert saved["training"]["grad_sample_mode"] == "ghost"
    with pytest.raises(PrivlmError, match="grad_sample_mode"):
        dp.DpSgdConfig(grad_sample_mode="turbo")


def test_one_example_per_sampled_user(tmp_path):
    st = dp.train_dpsgd(
        "tiny",
        dataset(48, users=12),
        tmp_path / "u1",
        dp.DpSgdConfig(target_epsilon=5.0, user_sampling="one-per-user", **CFG),
        progress=False,
    )
    # the accounting is over users, as with joint clipping
    assert st.unit == "user" and st.units == 12 and st.sample_rate == 1.0
    assert "one example per sampled user" in st.unit_detail


@pytest.mark.fast
def test_one_example_per_user_draws_each_users_own_records():
    tensors = (torch.arange(10).view(10, 1),)
    rows = [[0, 1, 2], [3], [4, 5, 6, 7, 8, 9]]
    ds = dp.OneExamplePerUser(tensors, rows, PrivacyRandomness().torch_generator())
    assert len(ds) == 3
    seen = {u: {int(ds[u][0]) for _ in range(200)} for u in range(3)}
    assert seen == {0: {0, 1, 2}, 1: {3}, 2: set(range(4, 10))}


def adapter_digest(path):
    import hashlib

    return hashlib.sha256((path / "adapter_model.safetensors").read_bytes()).hexdigest()


@pytest.fixture
def batch_log(monkeypatch):
    """Every Poisson batch Opacus draws, in order."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    log: list[list[int]] = []
    real = UniformWithReplacementSampler.__iter__

    def spy(self):
        for b in real(self):
            log.append([int(i) for i in b])
            yield b

    monkeypatch.setattr(UniformWithReplacementSampler, "__iter__", spy)
    return log


def run_recording_batches(path, log, seed):
    start = len(log)
    st = dp.train_dpsgd(
        "tiny",
        dataset(),
        path,
        dp.DpSgdConfig(target_epsilon=3.0, seed=seed, **CFG),
        progress=False,
    )
    return st, log[start:], adapter_digest(path)


def test_without_a_seed_two_runs_differ_in_noise_and_batches(tmp_path, batch_log):
    """Two identical jobs on the same data must not give the same adapter: the noise and the
    batches come from fresh OS entropy, not from a default seed."""
    st1, b1, d1 = run_recording_batches(tmp_path / "a", batch_log, None)
    _, b2, d2 = run_recording_batches(tmp_path / "b", batch_log, None)
    assert len(b1) == len(b2) == 6 and b1 != b2 and d1 != d2
    assert st1.seed is None and st1.warning is None
    assert json.loads((tmp_path / "a" / "privacy.json").read_text())["randomness"].startswith(
        "fresh OS entropy"
    )


def test_the_same_explicit_seed_repeats_and_says_what_that_costs(tmp_path, batch_log):
    st1, b1, d1 = run_recording_batches(tmp_path / "a", batch_log, 11)
    _, b2, d2 = run_recording_batches(tmp_path / "b", batch_log, 11)
    assert len(b1) == 6 and b1 == b2 and d1 == d2
    assert st1.seed == 11 and st1.warning == SEEDED_WARNING
    written = json.loads((tmp_path / "a" / "privacy.json").read_text())
    assert written["warning"] == SEEDED_WARNING and written["seed"] == 11


def test_the_cli_warns_about_a_seed(tmp_path):
    from typer.testing import CliRunner

    from privlm.cli import app

    data = tmp_path / "d.txt"
    data.write_text("\n".join(f"line {i} of private notes" for i in range(20)))
    args = ["train", "dpsgd", str(data), "--out", str(tmp_path / "o"), "--model", "tiny"]
    args += ["--batch-size", "10", "--block-size", "16", "--ledger", str(tmp_path / "l.db")]
    res = CliRunner().invoke(app, [*args, "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert "does not hold against anyone who knows the seed" in res.stderr


def test_dpsgd_on_a_bf16_model(tmp_path):
    """The base model in bfloat16 (what a GPU runs by default), on the CPU. The
    LoRA parameters, their per-sample gradients and the noise stay float32; the statement
    records where the model ran."""
    from peft import PeftModel
    from safetensors.torch import load_file

    cfg = dp.DpSgdConfig(target_epsilon=3.0, device="cpu", dtype="bfloat16", **CFG)
    st = dp.train_dpsgd("tiny", dataset(), tmp_path / "bf16", cfg, progress=False)
    assert st.epsilon <= 3.0 and (st.device, st.dtype) == ("cpu", "bfloat16")
    saved = json.loads((tmp_path / "bf16" / "privacy.json").read_text())
    assert saved["dtype"] == "bfloat16"
    weights = load_file(str(tmp_path / "bf16" / "adapter_model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.float32}
    assert all(torch.isfinite(t).all() for t in weights.values())
    PeftModel.from_pretrained(load_public_model("tiny", device="cpu").model, tmp_path / "bf16")


def test_a_run_that_ends_with_non_finite_parameters_writes_nothing_and_stays_charged(
    tmp_path, monkeypatch
):
    """Training checks its own result. The noise ran on the data, so the charge
    is not refunded; no adapter of NaNs leaves."""
    from privlm.accounting import Budget, PrivacyLedger

    real = dp.dp_fit

    def then_nan(model, *args, **kwargs):
        real(model, *args, **kwargs)
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.fill_(float("nan"))

    monkeypatch.setattr(dp, "dp_fit", then_nan)
    ledger = PrivacyLedger(tmp_path / "l.db", "data", Budget(3.0, 1e-6))
    cfg = dp.DpSgdConfig(target_epsilon=3.0, **CFG)
    with pytest.raises(PrivlmError, match=r"non-finite parameters.*stays charged"):
        dp.train_dpsgd("tiny", dataset(), tmp_path / "a", cfg, progress=False, ledger=ledger)
    assert not (tmp_path / "a").exists()
    assert ledger.count() == 1


@pytest.mark.fast
@pytest.mark.parametrize("field", ["max_grad_norm", "learning_rate", "target_epsilon"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_settings_are_refused_by_name(field, value):
    with pytest.raises(PrivlmError, match=f"{field} must be"):
        dp.DpSgdConfig(**{"target_epsilon": 3.0, field: value})
