"""Perplexity of a causal LM on text, in non-overlapping blocks, with a progress bar."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.progress import progress_bar


@dataclass(frozen=True)
class PerplexityResult:
    perplexity: float
    mean_nll: float
    tokens_scored: int
    blocks: int


def token_blocks(
    tokenizer: PreTrainedTokenizerBase,
    texts: Iterable[str],
    block_size: int,
    max_blocks: int | None,
) -> torch.Tensor:
    """Concatenate ``texts`` (newline-joined), tokenize, and cut into full blocks."""
    ids: list[int] = []
    need = None if max_blocks is None else max_blocks * block_size
    for text in texts:
        ids.extend(tokenizer(text + "\n", add_special_tokens=False)["input_ids"])
        if need is not None and len(ids) >= need:
            break
    n = len(ids) // block_size
    if max_blocks is not None:
        n = min(n, max_blocks)
    if n == 0:
        raise ValueError(f"not enough text for one block of {block_size} tokens")
    return torch.tensor(ids[: n * block_size], dtype=torch.long).view(n, block_size)


@torch.no_grad()
def perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Iterable[str],
    block_size: int = 512,
    max_blocks: int | None = None,
    batch_size: int = 4,
    progress: bool = True,
) -> PerplexityResult:
    """exp of the mean next-token NLL over every predicted token of every block."""
    blocks = token_blocks(tokenizer, texts, block_size, max_blocks)
    return block_perplexity(model, blocks, batch_size, progress)


@torch.no_grad()
def block_perplexity(
    model: PreTrainedModel, blocks: torch.Tensor, batch_size: int = 4, progress: bool = True
) -> PerplexityResult:
    """:func:`perplexity` of token blocks already cut, (blocks, block_size)."""
    total_nll, total_tokens = 0.0, 0
    model.eval()
    bar = progress_bar(total=len(blocks), desc="perplexity", unit="block", disable=not progress)
    for start in range(0, len(blocks), batch_size):
        batch = blocks[start : start + batch_size].to(model.device)
        logits = model(input_ids=batch).logits[:, :-1].float()
        targets = batch[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum"
        )
        total_nll += float(nll)
        total_tokens += targets.numel()
        bar.update(len(batch))
    bar.close()
    mean = total_nll / total_tokens
    return PerplexityResult(math.exp(mean), mean, total_tokens, len(blocks))
