"""User-level DP-SGD on all of each user's data: every token is trained on
unless a cap says otherwise, a user's gradient is the sum (or mean) of their blocks'
gradients, clipped jointly, and the token usage is reported."""

from __future__ import annotations

import json

import pytest
import torch
from opacus import GradSampleModule
from peft import LoraConfig, get_peft_model

from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import load_public_model
from privlm.training import dpsgd as dp
from privlm.training.lora_targets import discover_lora_targets
from privlm.training.redaction import mask_embedding, per_example_losses
from privlm.training.user_level import (
    _user_gradients,
    unit_token_counts,
    usage_when_blocking,
    user_blocks,
)


def users_dataset(users=6, per_user=5):
    recs = [
        Record(
            f"ticket {k} of customer {u}: the printer on floor {k} jams again and again",
            f"user-{u}",
        )
        for u in range(users)
        for k in range(per_user)
    ]
    return Dataset(recs, "test", "user")


def groups(ds):
    return dp.records_per_unit(ds)


def lora_on_tiny():
    """The tiny model with a seeded, non-zero LoRA adapter: (lm, model, trainable, mask)."""
    lm = load_public_model("tiny")
    torch.manual_seed(0)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=discover_lora_targets(lm.model),
                     init_lora_weights=False)  # fmt: skip
    model = get_peft_model(lm.model, cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return lm, model, trainable, mask_embedding(lm.model, lm.tokenizer)


def test_blocks_hold_every_token_of_every_user():
    tok = load_public_model("tiny").tokenizer
    g = groups(users_dataset())
    blocks = user_blocks(tok, g, 16)
    counts = unit_token_counts(tok, g)
    trained = int((blocks.labels != -100).sum())
    assert trained == sum(sum(c) for c in counts)  # every token, EOS included, is a target
    assert torch.bincount(blocks.owner).tolist() == [-(-sum(c) // 16) for c in counts]
    capped = user_blocks(tok, g, 16, max_blocks=2)
    assert torch.bincount(capped.owner).max() == 2
    usage = usage_when_blocking(counts, 16, 2)
    assert usage.used == int((capped.labels != -100).sum()) and usage.dropped > 0
    assert "cap of 2 blocks" in usage.describe()


def test_a_users_gradient_is_the_sum_of_their_blocks_gradients():
    lm, model, trainable, mask = lora_on_tiny()
    blocks = user_blocks(lm.tokenizer, groups(users_dataset(4, 3)), 16)
    gsm = GradSampleModule(model, loss_reduction="sum")
    users = torch.tensor([1, 3])
    acc = _user_gradients(gsm, blocks, users, trainable, 3, torch.device("cpu"), mask)
    gsm._close()
    for slot, u in enumerate(users.tolist()):
        model.zero_grad(set_to_none=True)
        rows = torch.nonzero(blocks.owner == u).flatten()
        for r in rows.tolist():  # one block at a time: the reference
            x, y = blocks.ids[r : r + 1], blocks.labels[r : r + 1]
            logits = model(input_ids=x, attention_mask=(y != -100).long()).logits
            per_example_losses(logits, y).sum().backward()
        for a, p in zip(acc, trainable, strict=True):
            torch.testing.assert_close(a[slot], p.grad, atol=1e-6, rtol=1e-4)


def test_user_level_dpsgd_trains_on_every_token_and_says_so(tmp_path):
    cfg = dp.DpSgdConfig(target_epsilon=5.0, batch_size=3, physical_batch_size=4, epochs=1,
                         block_size=16, learning_rate=1e-2)  # fmt: skip
    st = dp.train_dpsgd("tiny", users_dataset(), tmp_path / "u", cfg, progress=False)
    assert st.unit == "user" and st.units == 6 and st.epsilon <= 5.0
    usage = st.token_usage
    assert usage["dropped"] == 0 and usage["used"] == usage["tokens"] > 6 * 16
    saved = json.loads((tmp_path / "u" / "privacy.json").read_text())
    assert "token_usage" not in saved and "every block" in saved["unit_detail"]
    report = json.loads((tmp_path / "u.curator.json").read_text())  # beside, for the curator
    assert report["statistics"]["token_usage"] == usage
    capped = dp.DpSgdConfig(**{**cfg.__dict__, "max_blocks_per_user": 1})
    st = dp.train_dpsgd("tiny", users_dataset(), tmp_path / "c", capped, progress=False)
    assert st.token_usage["dropped"] > 0 and st.token_usage["units_with_drops"] == 6


def test_record_level_reports_what_truncation_drops(tmp_path):
    recs = [Record("word " * 40, f"record-{i}") for i in range(8)]
    cfg = dp.DpSgdConfig(target_epsilon=5.0, batch_size=4, physical_batch_size=4, epochs=1,
                         block_size=16)  # fmt: skip
    st = dp.train_dpsgd("tiny", Dataset(recs, "t"), tmp_path / "r", cfg, progress=False)
    assert st.token_usage["dropped"] > 0 and st.token_usage["units_with_drops"] == 8


def test_joint_user_clipping_refuses_ghost_mode(tmp_path):
    cfg = dp.DpSgdConfig(target_epsilon=5.0, grad_sample_mode="ghost", block_size=16)
    with pytest.raises(PrivlmError, match="hooks mode"):
        dp.train_dpsgd("tiny", users_dataset(), tmp_path / "g", cfg, progress=False)


def test_without_noise_a_step_moves_by_the_mean_of_per_user_clipped_gradients(monkeypatch):
    """σ = 0, every user sampled, plain SGD: the update is −lr · Σ_u clip(g_u) / users, where
    g_u sums the gradients of all of user u's blocks. Clipping is per user, not per block:
    the sensitivity the accounting assumes."""
    from privlm.training import user_level

    lm, model, trainable, mask = lora_on_tiny()
    blocks = user_blocks(lm.tokenizer, groups(users_dataset(3, 4)), 16)
    gsm = GradSampleModule(model, loss_reduction="sum")
    per_user = _user_gradients(
        gsm, blocks, torch.arange(3), trainable, 4, torch.device("cpu"), mask
    )
    gsm._close()
    for p in trainable:
        p.grad_sample = None
    clip = 0.5
    norms = torch.stack([a.flatten(1).norm(dim=1) for a in per_user]).norm(dim=0)
    assert bool((norms > clip).all())  # every user is clipped: the test can tell
    factor = (clip / norms).clamp(max=1.0)
    expected = [(a * factor.view(-1, *[1] * (a.dim() - 1))).sum(0) / 3 for a in per_user]
    before = [p.detach().clone() for p in trainable]
    lr = 0.1
    monkeypatch.setattr(
        user_level.torch.optim,
        "AdamW",
        lambda params, lr, weight_decay: torch.optim.SGD(params, lr=lr),
    )
    user_level.train_users_jointly(
        model, blocks, sigma=0.0, max_grad_norm=clip, sample_rate=1.0, steps=1,
        physical_batch_size=4, learning_rate=lr, reduction="sum",
        sampling=torch.Generator().manual_seed(0), noise=None, mask_vector=mask, progress=False,
    )  # fmt: skip
    for p, b, e in zip(trainable, before, expected, strict=True):
        torch.testing.assert_close(p.detach(), b - lr * e, atol=1e-6, rtol=1e-4)
