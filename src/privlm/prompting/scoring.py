"""Scoring prompts: the probability of each class's label token, batched; contextual
calibration (Zhao et al. 2021); and the black-box mode, where the model returns only its
top-1 next token (PromptPATE's teachers, Flocks §4.2).

Batches are left-padded so every row's next-token logits sit at the last position, grouped
by length, and built on the model's device; what comes back is float32 on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.models.placement import module_device
from privlm.progress import progress_bar
from privlm.prompting.tasks import CONTENT_FREE as CONTENT_FREE

OTHER = -1  # a black-box answer that is no class's label token


def left_padded_batches(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    batch_size: int,
    device: torch.device,
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(rows, ids, mask, positions) per batch, on ``device``. Prompts are grouped by length
    (a stable sort), so a batch carries little padding; ``rows`` says which prompts it holds."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    enc = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(enc[i]) for i in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            ids[r, width - len(enc[i]) :] = torch.tensor(enc[i])
            mask[r, width - len(enc[i]) :] = 1
        positions = (mask.cumsum(1) - 1).clamp_min(0)
        yield rows, ids.to(device), mask.to(device), positions.to(device)


@torch.no_grad()
def next_token_logits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    batch_size: int = 16,
) -> torch.Tensor:
    """Next-token logits after each prompt, shape (len(prompts), vocab), float32 on the CPU
    whatever the model's device and dtype."""
    model.eval()
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for rows, ids, mask, pos in left_padded_batches(
        tokenizer, prompts, batch_size, module_device(model)
    ):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        for r, row in enumerate(logits[:, -1].float().cpu()):
            out[rows[r]] = row
    return torch.stack(out) if out else torch.empty(0)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PromptScores:
    """What PromptPATE needs of each prompt's next token, without the full vocabulary:
    the top-1 token and the label tokens' logits (float32)."""

    top1: torch.Tensor  # (P,) token ids
    label_logits: torch.Tensor  # (P, classes)


@torch.no_grad()
def score_prompts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_ids: Sequence[int],
    batch_size: int = 64,
    progress: bool = False,
) -> PromptScores:
    """Top-1 tokens and label logits of many prompts in large batches on the model's device;
    only (P, classes + 1) numbers come back to the CPU, so hundreds of teachers' prompts can
    be scored in one call."""
    model.eval()
    top1 = torch.empty(len(prompts), dtype=torch.long)
    labels = torch.empty(len(prompts), len(label_ids), dtype=torch.float32)
    index = torch.tensor(list(label_ids), dtype=torch.long)
    device = module_device(model)
    bar = progress_bar(total=len(prompts), desc="scoring", unit="prompt", disable=not progress)
    for rows, ids, mask, pos in left_padded_batches(tokenizer, prompts, batch_size, device):
        last = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
        at = torch.tensor(rows, dtype=torch.long)
        top1[at] = last.argmax(-1).cpu()
        labels[at] = last[:, index.to(last.device)].cpu()
        bar.update(len(rows))
    bar.close()
    return PromptScores(top1, labels)


def label_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_ids: Sequence[int],
    batch_size: int = 16,
) -> NDArray[np.float64]:
    """P(class) from the label tokens' logits, renormalised over the classes: (N, C)."""
    logits = score_prompts(model, tokenizer, prompts, label_ids, batch_size).label_logits
    return torch.softmax(logits.double(), dim=-1).numpy()


def calibrate(probs: NDArray[np.float64], content_free: NDArray[np.float64]) -> NDArray[np.float64]:
    """Contextual calibration: p ∝ p / p_cf, with p_cf the mean class probabilities of the
    same prompt on content-free inputs (W = diag(p_cf)^-1, b = 0)."""
    p_cf = np.asarray(content_free, dtype=np.float64).reshape(-1, probs.shape[-1]).mean(0)
    q = probs / p_cf
    out: NDArray[np.float64] = q / q.sum(-1, keepdims=True)
    return out


def top1_classes(top1: torch.Tensor, label_ids: Sequence[int]) -> NDArray[np.int64]:
    """The class whose label token is each top-1 token, or ``OTHER``."""
    lookup = {tok: c for c, tok in enumerate(label_ids)}
    return np.array([lookup.get(int(t), OTHER) for t in top1], dtype=np.int64)


def blackbox_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_ids: Sequence[int],
    batch_size: int = 16,
) -> NDArray[np.int64]:
    """The class whose label token is the model's top-1 next token, or ``OTHER``: an answer
    that maps to no class is never a vote for one."""
    return top1_classes(
        score_prompts(model, tokenizer, prompts, label_ids, batch_size).top1, label_ids
    )
