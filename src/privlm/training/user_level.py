"""User-level DP-SGD on *all* of each user's data.

A user's records are joined (EOS between them) and cut into blocks of ``block_size``
tokens; the last, shorter block is padded. Every block is trained on, unless
``max_blocks_per_user`` caps them (the tokens beyond the cap are counted as dropped and
reported).

A step (Abadi et al. 2016, Algorithm 1, with the user as the unit):

1. each user joins the step's batch independently with probability q (Poisson sampling of
   users, the sampled Gaussian mechanism the accountant assumes);
2. per-block gradients come from Opacus (hooks), one physical batch of blocks at a time;
3. a user's gradient is the mean (or sum) of their blocks' gradients, accumulated per user
   across physical batches;
4. each *user's* gradient is clipped to C, the clipped gradients are summed and Gaussian
   noise N(0, σ²C²) added (Opacus's ``DPOptimizer``), then divided by the expected number
   of users q·n.

Adding or removing one user changes the sum by at most C, so the sensitivity, and the
accounting, are those of record-level DP-SGD with users as records: every token counts at
no privacy cost. Hooks mode only (ghost clipping computes per-row norms, which cannot be
summed per user first), in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from transformers import PreTrainedTokenizerBase

from privlm.detect import Span
from privlm.errors import PrivlmError
from privlm.models.known_warnings import quiet_during_dp_fit
from privlm.progress import LossMeter, progress_bar
from privlm.training.config import USER_REDUCTIONS as USER_REDUCTIONS
from privlm.training.redaction import IGNORE, embed_with_masks, encode_redacted, per_example_losses
from privlm.training.secure_noise import install_csprng_noise, poisson_coins


@dataclass(frozen=True)
class TokenUsage:
    """How many of the data's tokens training sees, per privacy unit."""

    units: int
    tokens: int
    used: int
    dropped: int
    units_with_drops: int
    max_dropped_per_unit: int
    rule: str

    @property
    def used_fraction(self) -> float:
        return self.used / self.tokens if self.tokens else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "used_fraction": self.used_fraction, "summary": self.describe()}

    def describe(self) -> str:
        line = f"trains on {self.used:,} of {self.tokens:,} tokens ({self.used_fraction:.1%})"
        if self.dropped:
            line += (
                f"; {self.dropped:,} dropped from {self.units_with_drops} of {self.units} units "
                f"(at most {self.max_dropped_per_unit:,} from one) by {self.rule}"
            )
        return line


def unit_token_counts(
    tokenizer: PreTrainedTokenizerBase, groups: Sequence[Sequence[str]]
) -> list[list[int]]:
    """Tokens of each record (+ its EOS), per unit."""
    return [
        [len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in g] for g in groups
    ]


def usage_when_truncating(counts: list[list[int]], block_size: int, rule: str) -> TokenUsage:
    """Each record its own example, cut at ``block_size`` tokens."""
    dropped = [sum(max(0, c - block_size) for c in g) for g in counts]
    total = sum(sum(g) for g in counts)
    return TokenUsage(
        len(counts), total, total - sum(dropped), sum(dropped),
        sum(d > 0 for d in dropped), max(dropped, default=0), rule,
    )  # fmt: skip


def usage_when_blocking(
    counts: list[list[int]], block_size: int, max_blocks: int | None
) -> TokenUsage:
    """A unit's records joined and cut into blocks, at most ``max_blocks`` of them."""
    totals = [sum(g) for g in counts]
    cap = None if max_blocks is None else max_blocks * block_size
    dropped = [0 if cap is None else max(0, t - cap) for t in totals]
    return TokenUsage(
        len(counts), sum(totals), sum(totals) - sum(dropped), sum(dropped),
        sum(d > 0 for d in dropped), max(dropped, default=0),
        f"the cap of {max_blocks} blocks per user" if max_blocks else "nothing",
    )  # fmt: skip


@dataclass(frozen=True)
class UserBlocks:
    """Every user's blocks: ids, labels (IGNORE at padding and masks), mask flags, and the
    index of the user each block belongs to."""

    ids: torch.Tensor
    labels: torch.Tensor
    masked: torch.Tensor
    owner: torch.Tensor
    users: int


def user_blocks(
    tokenizer: PreTrainedTokenizerBase,
    groups: Sequence[Sequence[str]],
    block_size: int,
    max_blocks: int | None = None,
    spans: Sequence[Sequence[Sequence[Span]]] | None = None,
) -> UserBlocks:
    """Each user's records joined by EOS and cut into ``block_size`` blocks (the last one
    padded), the first ``max_blocks`` kept. With ``spans`` (per user, per record), detected
    spans become mask slots (JFT A.2)."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    rows_ids, rows_masked, owners = [], [], []
    for u, texts in enumerate(groups):
        ids: list[int] = []
        masked: list[bool] = []
        for i, text in enumerate(texts):
            a, m = encode_redacted(tokenizer, text, spans[u][i] if spans is not None else [])
            ids.extend([*a, eos])
            masked.extend([*m, False])
        n_blocks = -(-len(ids) // block_size)
        if max_blocks is not None:
            n_blocks = min(n_blocks, max_blocks)
        for b in range(n_blocks):
            rows_ids.append(ids[b * block_size : (b + 1) * block_size])
            rows_masked.append(masked[b * block_size : (b + 1) * block_size])
            owners.append(u)
    n = len(rows_ids)
    out_ids = torch.full((n, block_size), pad, dtype=torch.long)
    out_labels = torch.full((n, block_size), IGNORE, dtype=torch.long)
    out_masked = torch.zeros((n, block_size), dtype=torch.bool)
    for r, (ids_, m_) in enumerate(zip(rows_ids, rows_masked, strict=True)):
        k = len(ids_)
        out_ids[r, :k] = torch.tensor(ids_)
        out_masked[r, :k] = torch.tensor(m_, dtype=torch.bool)
        out_labels[r, :k] = torch.where(out_masked[r, :k], IGNORE, out_ids[r, :k])
    return UserBlocks(out_ids, out_labels, out_masked, torch.tensor(owners), len(groups))


@quiet_during_dp_fit()  # the notices every run causes (privlm.models.known_warnings)
def train_users_jointly(
    model: torch.nn.Module,
    blocks: UserBlocks,
    *,
    sigma: float,
    max_grad_norm: float,
    sample_rate: float,
    steps: int,
    physical_batch_size: int,
    learning_rate: float,
    reduction: str,
    sampling: torch.Generator | None,
    noise: torch.Generator | None,
    mask_vector: torch.Tensor,
    progress: bool = True,
) -> None:
    """``steps`` DP-SGD steps over users (module docstring); trains ``model`` in place.
    ``sampling``/``noise`` None: coins and noise from the OS CSPRNG (secure mode)."""
    if reduction not in USER_REDUCTIONS:
        raise PrivlmError(f"user reduction must be one of {USER_REDUCTIONS}, not {reduction!r}")
    device = next(p for p in model.parameters() if p.requires_grad).device
    trainable = [p for p in model.parameters() if p.requires_grad]
    gsm = GradSampleModule(model, loss_reduction="sum")
    optimizer = DPOptimizer(
        torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.0),
        noise_multiplier=sigma,
        max_grad_norm=max_grad_norm,
        expected_batch_size=max(1, round(sample_rate * blocks.users)),
        loss_reduction="mean",
        generator=noise,
    )
    if noise is None:
        install_csprng_noise(optimizer)
    per_user_blocks = torch.bincount(blocks.owner, minlength=blocks.users).clamp_min(1)
    before = [p.detach().clone() for p in trainable]
    gsm.train()
    bar = progress_bar(total=steps, desc="dp-sgd (users)", unit="step", disable=not progress)
    meter = LossMeter()  # the mean loss per block of the step's users
    try:
        for _ in range(steps):
            users = torch.nonzero(poisson_coins(blocks.users, sample_rate, sampling))
            users = users.flatten()
            acc = _user_gradients(
                gsm, blocks, users, trainable, physical_batch_size, device, mask_vector, meter
            )
            if reduction == "mean":
                scale = 1.0 / per_user_blocks[users].to(device, torch.float32)
                acc = [a * scale.view(-1, *([1] * (a.dim() - 1))) for a in acc]
            optimizer.zero_grad(set_to_none=True)
            for p, a in zip(trainable, acc, strict=True):
                p.grad_sample = a  # type: ignore[attr-defined]  # one row per sampled user
            optimizer.step()
            bar.update(1)
            meter.report(bar)
    finally:
        bar.close()
        gsm._close()
    if any(torch.equal(p.detach(), b) for p, b in zip(trainable, before, strict=True)):
        raise PrivlmError("a trainable parameter did not change during DP-SGD")


def _user_gradients(
    gsm: GradSampleModule,
    blocks: UserBlocks,
    users: torch.Tensor,
    trainable: list[torch.nn.Parameter],
    physical_batch_size: int,
    device: torch.device,
    mask_vector: torch.Tensor,
    meter: LossMeter | None = None,
) -> list[torch.Tensor]:
    """The summed per-block gradients of each sampled user: one (users, *shape) tensor per
    trainable parameter (zero rows for an empty batch)."""
    acc = [torch.zeros((len(users), *p.shape), dtype=p.dtype, device=device) for p in trainable]
    meter = meter if meter is not None else LossMeter()
    for p in trainable:  # the last step's per-user rows, left by the optimizer
        p.grad_sample = None  # type: ignore[attr-defined]
    if len(users) == 0:
        return acc
    slot = torch.full((blocks.users,), -1, dtype=torch.long)
    slot[users] = torch.arange(len(users))
    rows = torch.nonzero(slot[blocks.owner] >= 0).flatten()
    for start in range(0, len(rows), physical_batch_size):
        pick = rows[start : start + physical_batch_size]
        x, y, m = (t[pick].to(device) for t in (blocks.ids, blocks.labels, blocks.masked))
        attention = ((y != IGNORE) | m).long()
        if bool(m.any()):
            embeds = embed_with_masks(gsm._module, x, m, mask_vector)
            logits = gsm(inputs_embeds=embeds, attention_mask=attention).logits
        else:
            logits = gsm(input_ids=x, attention_mask=attention).logits
        losses = per_example_losses(logits, y)
        losses.sum().backward()
        meter.add(losses.detach().sum(), len(losses))
        owner_slot = slot[blocks.owner[pick]].to(device)
        for a, p in zip(acc, trainable, strict=True):
            sample = getattr(p, "grad_sample", None)
            if sample is None:
                raise PrivlmError("a parameter got no per-block gradient: DP-SGD would skip it")
            a.index_add_(0, owner_slot, sample.to(a.dtype))
            p.grad_sample = None  # type: ignore[attr-defined]
            p.grad = None
    return acc
