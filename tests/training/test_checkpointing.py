"""Gradient checkpointing under DP-SGD: per-sample gradients and norms are
exactly those of the plain model in the form privlm enables, the form it avoids really is
broken under Opacus, and what cannot checkpoint is refused with the reason."""

from __future__ import annotations

import pytest
import torch
from opacus import GradSampleModule
from opacus.grad_sample import GradSampleModuleFastGradientClipping
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file

from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.training import dpsgd as dp
from privlm.training.checkpointing import enable_gradient_checkpointing
from privlm.training.lora_targets import discover_lora_targets
from tests.training.test_dpsgd import CFG, dataset


def lora(checkpointing: bool):
    lm = load_public_model("tiny", device="cpu")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        targets = discover_lora_targets(lm.model)
        model = get_peft_model(
            lm.model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
        )
    if checkpointing:
        enable_gradient_checkpointing(model)
    return model.train()


def token_losses(logits, ids):
    flat = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), reduction="none"
    )
    return flat.view(ids.size(0), -1).sum(1)


IDS = torch.randint(0, 2000, (3, 12), generator=torch.Generator().manual_seed(1))


def hooks_grad_samples(checkpointing: bool) -> dict[str, torch.Tensor]:
    model = lora(checkpointing)
    gsm = GradSampleModule(model)
    token_losses(gsm(input_ids=IDS).logits, IDS).sum().backward()
    out = {n: p.grad_sample.clone() for n, p in model.named_parameters() if p.requires_grad}
    gsm._close()
    return out


def test_per_sample_gradients_are_unchanged_by_checkpointing():
    plain, ckpt = hooks_grad_samples(False), hooks_grad_samples(True)
    assert plain.keys() == ckpt.keys() and plain
    for name in plain:
        assert torch.allclose(plain[name], ckpt[name], atol=1e-7), name


def test_ghost_clipping_norms_are_unchanged_by_checkpointing():
    norms = []
    for checkpointing in (False, True):
        model = lora(checkpointing)
        gsm = GradSampleModuleFastGradientClipping(
            model, max_grad_norm=1e9, use_ghost_clipping=True
        )
        token_losses(gsm(input_ids=IDS).logits, IDS).sum().backward()
        params = [p for p in model.parameters() if p.requires_grad]
        norms.append(torch.stack([p._norm_sample for p in params]))
    assert torch.allclose(norms[0], norms[1], atol=1e-6)


def test_non_reentrant_checkpointing_breaks_opacus_so_privlm_never_uses_it():
    """The reason privlm picks the reentrant form: under the other, Opacus silently leaves
    per-sample gradients out (or fails). If a future Opacus handles it, this test says so."""
    reference = hooks_grad_samples(False)
    model = lora(False)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    gsm = GradSampleModule(model)
    token_losses(gsm(input_ids=IDS).logits, IDS).sum().backward()  # no error: silent
    got = {n: p.grad_sample for n, p in model.named_parameters() if p.requires_grad}
    missing = [n for n, g in got.items() if g is None]
    assert got.keys() == reference.keys()
    # with the pinned Opacus, most LoRA parameters are left without a per-sample gradient
    # (each layer's last recomputed one keeps it): DP-SGD would skip them, and privlm's
    # dp_loop refuses that, naming them
    assert len(missing) > len(reference) // 2, missing


def test_a_checkpointed_dpsgd_run_gives_the_same_adapter(tmp_path, mode="hooks"):
    """Same seed, same noise and batches: checkpointing changes memory, not the release."""
    adapters = []
    for ckpt in (False, True):
        cfg = dp.DpSgdConfig(
            target_epsilon=3.0,
            seed=5,
            grad_sample_mode=mode,
            gradient_checkpointing=ckpt,
            **{**CFG, "epochs": 1},
        )
        dp.train_dpsgd("tiny", dataset(24), tmp_path / f"{ckpt}", cfg, progress=False)
        adapters.append(load_file(str(tmp_path / f"{ckpt}" / "adapter_model.safetensors")))
    for name, w in adapters[0].items():
        assert torch.allclose(w, adapters[1][name], atol=1e-5), name


def test_what_cannot_checkpoint_is_refused_with_the_reason():
    class NoCheckpointing(torch.nn.Module):
        supports_gradient_checkpointing = False

    with pytest.raises(PrivlmError, match="does not support gradient checkpointing"):
        enable_gradient_checkpointing(NoCheckpointing())
    with pytest.raises(PrivlmError, match="distributed DP-SGD"):
        enable_gradient_checkpointing(lora(False), distributed=True)
