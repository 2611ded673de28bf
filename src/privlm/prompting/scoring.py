"""Scoring prompts: the probability of each class's label token, batched; contextual
calibration (Zhao et al. 2021); and the black-box mode, where the model returns only its
top-1 next token (PromptPATE's teachers, Flocks §4.2).

Batches are left-padded so every row's next-token logits sit at the last position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from transformers import PreTrainedModel, PreTrainedTokenizerBase

OTHER = -1  # a black-box answer that is no class's label token
CONTENT_FREE = ("N/A", "", "[MASK]")  # Zhao et al. 2021's content-free inputs


@torch.no_grad()
def next_token_logits(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    batch_size: int = 16,
) -> torch.Tensor:
    """Next-token logits after each prompt, shape (len(prompts), vocab)."""
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = []
    for start in range(0, len(prompts), batch_size):
        enc = [
            tokenizer(p, add_special_tokens=False)["input_ids"]
            for p in prompts[start : start + batch_size]
        ]
        width = max(len(e) for e in enc)
        ids = torch.full((len(enc), width), pad, dtype=torch.long)
        mask = torch.zeros((len(enc), width), dtype=torch.long)
        for i, e in enumerate(enc):
            ids[i, width - len(e) :] = torch.tensor(e)
            mask[i, width - len(e) :] = 1
        positions = (mask.cumsum(1) - 1).clamp_min(0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        out.append(logits[:, -1].float())
    return torch.cat(out)


def label_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_ids: Sequence[int],
    batch_size: int = 16,
) -> NDArray[np.float64]:
    """P(class) from the label tokens' logits, renormalised over the classes: (N, C)."""
    logits = next_token_logits(model, tokenizer, prompts, batch_size)[:, list(label_ids)]
    return torch.softmax(logits.double(), dim=-1).numpy()


def calibrate(probs: NDArray[np.float64], content_free: NDArray[np.float64]) -> NDArray[np.float64]:
    """Contextual calibration: p ∝ p / p_cf, with p_cf the mean class probabilities of the
    same prompt on content-free inputs (W = diag(p_cf)^-1, b = 0)."""
    p_cf = np.asarray(content_free, dtype=np.float64).reshape(-1, probs.shape[-1]).mean(0)
    q = probs / p_cf
    out: NDArray[np.float64] = q / q.sum(-1, keepdims=True)
    return out


def top1_classes(logits: torch.Tensor, label_ids: Sequence[int]) -> NDArray[np.int64]:
    """The class whose label token is each row's top-1 token, or ``OTHER``."""
    lookup = {tok: c for c, tok in enumerate(label_ids)}
    return np.array([lookup.get(int(t), OTHER) for t in logits.argmax(-1)], dtype=np.int64)


def blackbox_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    label_ids: Sequence[int],
    batch_size: int = 16,
) -> NDArray[np.int64]:
    """The class whose label token is the model's top-1 next token, or ``OTHER``: an answer
    that maps to no class is never a vote for one."""
    return top1_classes(next_token_logits(model, tokenizer, prompts, batch_size), label_ids)
