"""Canary exposure (Carlini et al. 2019), as the JFT paper audits it (§6.4).

A canary "My ID is <d digits>" is inserted r times into the training data. Exposure is
log2|R| − log2(rank), where R is all 10^d digit strings and the rank orders them by their
total log-likelihood under the model, given the prefix (rank 1 = most likely).

Scoring all 10^d candidates does not take 10^d forward passes: the candidates form a tree of
shared prefixes, and the digits are single tokens. Level k of the tree extends every
(k−1)-digit prefix by each of the 10 digits in one batched, KV-cached forward pass; subtrees
are processed one after another so the batch never exceeds ``max_rows``. That is
1 + 10 + … + 10^(d−1) token positions in all, each evaluated once. Before scoring, the
tokenizer is checked to split the prefix and every digit exactly this way.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from privlm.audit import DEFAULT_PREFIX as DEFAULT_PREFIX
from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models.placement import module_device
from privlm.progress import progress_bar

CUDA_MAX_ROWS = 50_000  # rows per batched pass on a GPU (see candidate_log_likelihoods)


def random_canary(n_digits: int = 6, seed: int | None = None) -> str:
    """A uniformly random digit string. Canaries must be random: a patterned one such as
    123456 is already the public model's most likely 6-digit string (exposure near the
    maximum before any training), so its exposure would measure nothing."""
    rng = random.SystemRandom() if seed is None else random.Random(seed)
    return "".join(rng.choice("0123456789") for _ in range(n_digits))


def patterned(canary: str) -> bool:
    """Whether ``canary``'s digits follow a pattern a language model already favours: one
    step repeated (111111, 123456, 975319; mod 10) or a repeated pair (121212)."""
    d = [int(c) for c in canary if c.isdigit()]
    if len(d) < 3:
        return False
    steps = {(b - a) % 10 for a, b in pairwise(d)}
    pairs = len(set(d[0::2])) == 1 and len(set(d[1::2])) == 1
    return len(steps) == 1 or pairs


def digit_tokens(
    tokenizer: PreTrainedTokenizerBase, prefix: str, n_digits: int
) -> tuple[list[int], list[int]]:
    """(prefix ids, ids of '0'..'9'); refuses a tokenizer that merges digits or the prefix."""
    digits = [tokenizer(str(d), add_special_tokens=False)["input_ids"] for d in range(10)]
    if any(len(x) != 1 for x in digits):
        raise PrivlmError(
            "this tokenizer does not encode each digit as one token; exposure by prefix tree needs that"
        )
    ids = [x[0] for x in digits]
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    rng = random.Random(0)
    for cand in ["0" * n_digits, "9" * n_digits] + [
        "".join(rng.choice("0123456789") for _ in range(n_digits)) for _ in range(20)
    ]:
        got = tokenizer(prefix + cand, add_special_tokens=False)["input_ids"]
        if got != prefix_ids + [ids[int(c)] for c in cand]:
            raise PrivlmError(
                f"{prefix + cand!r} does not tokenize as the prefix followed by one token per digit"
            )
    return prefix_ids, ids


def _digit_log_probs(logits: torch.Tensor, digit_idx: torch.Tensor) -> torch.Tensor:
    """log p(digit) for the 10 digits only: their logits minus the log-normaliser, from
    float32 logits whatever the model's dtype (an audit measurement; float64 over the whole
    vocabulary would double the largest batch's memory)."""
    lse = torch.logsumexp(logits.float(), dim=-1, keepdim=True)
    return (logits[:, digit_idx].float() - lse).double()


@torch.no_grad()
def candidate_log_likelihoods(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    n_digits: int,
    prefix: str = DEFAULT_PREFIX,
    max_rows: int = 10_000,
    progress: bool = True,
) -> np.ndarray:
    """log p(digits | prefix) for every d-digit string, indexed by its integer value."""
    prefix_ids, digit_ids = digit_tokens(tokenizer, prefix, n_digits)
    device = module_device(model)  # the tree is built and scored on the model's device
    digit_idx = torch.tensor(digit_ids, device=device)
    model.eval()
    if device.type == "cuda":
        # at 10^5 rows per pass cuDNN's scaled-dot-product attention refused to run (an
        # H200, docs/results.md "On a GPU"); 50,000 stays under CUDA's 65,535 grid rows
        max_rows = min(max_rows, CUDA_MAX_ROWS)
    # split off `head` leading digits so the deepest batch (10^(d-head-1) rows) fits max_rows
    head = max(0, n_digits - 1 - math.floor(math.log10(max(max_rows, 1))))
    scores = np.empty(10**n_digits, dtype=np.float64)
    subtrees = range(10**head)
    bar = progress_bar(subtrees, desc="exposure", unit="subtree", disable=not progress or head == 0)
    for sub in bar:
        lead = [int(c) for c in str(sub).zfill(head)] if head else []
        ctx = torch.tensor([prefix_ids + [digit_ids[d] for d in lead]], device=device)
        cache = DynamicCache()
        out = model(input_ids=ctx, past_key_values=cache, use_cache=True)
        out_logits = out.logits[0]  # the positions before each lead digit and the next one
        logp = _digit_log_probs(out_logits[-1:], digit_idx)
        base = 0.0  # log-likelihood of the lead digits, scored once per subtree
        if head:
            n_prefix = len(prefix_ids)
            lead_lp = _digit_log_probs(out_logits[n_prefix - 1 : n_prefix - 1 + head], digit_idx)
            base = float(sum(lead_lp[i, d] for i, d in enumerate(lead)))
        level = torch.full(
            (1,), base, dtype=torch.float64, device=device
        )  # scores of the current prefixes
        for k in range(n_digits - head):
            level = (level[:, None] + logp).reshape(-1)  # extend by each digit
            if k == n_digits - head - 1:
                break
            rows = level.numel()
            cache.batch_repeat_interleave(10)
            nxt = digit_idx.repeat(rows // 10)[:, None]
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            logp = _digit_log_probs(out.logits[:, -1], digit_idx)
        width = 10 ** (n_digits - head)
        scores[sub * width : (sub + 1) * width] = level.cpu().numpy()
    return scores


@dataclass(frozen=True)
class Exposure:
    canary: str
    rank: int
    candidates: int
    exposure: float
    max_exposure: float


def exposure_from_scores(scores: np.ndarray, canary: str) -> Exposure:
    """rank = 1 + #candidates strictly more likely; exposure = log2|R| − log2 rank."""
    own = scores[int(canary)]
    rank = 1 + int((scores > own).sum())
    total = len(scores)
    return Exposure(canary, rank, total, math.log2(total) - math.log2(rank), math.log2(total))


def measure_exposure(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    canary: str,
    prefix: str = DEFAULT_PREFIX,
    max_rows: int = 10_000,
    progress: bool = True,
) -> Exposure:
    if not canary.isdigit():
        raise PrivlmError(f"a canary must be digits, got {canary!r}")
    scores = candidate_log_likelihoods(model, tokenizer, len(canary), prefix, max_rows, progress)
    return exposure_from_scores(scores, canary)


def insert_canary(
    dataset: Dataset, canary: str, repeats: int, prefix: str = DEFAULT_PREFIX, seed: int = 0
) -> Dataset:
    """``dataset`` with ``repeats`` copies of the canary record at random positions (each its
    own record, as record-level privacy counts them)."""
    rng = random.Random(seed)
    records = list(dataset.records)
    for i in range(repeats):
        unit = f"canary-{i}" if dataset.unit_kind == "record" else "user-canary"
        records.insert(rng.randrange(len(records) + 1), Record(prefix + canary, unit))
    return Dataset(
        records, f"{dataset.source}+canary×{repeats}", dataset.unit_kind, dataset.skipped
    )
