"""Teacher-forced perplexity of the public model, one adapter, the plain ensemble average,
PMixED and SubMix, on held-out token blocks where every token is one query (as in both
papers). Private methods charge their ledgers like any other query."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from privlm.predict.engine import EnsembleEngine
from privlm.predict.pmixed import PMixED
from privlm.predict.submix import SubMix

METHODS = ("public", "finetuned", "ensemble", "pmixed", "submix")


@dataclass(frozen=True)
class PerplexityReport:
    method: str
    perplexity: float
    tokens: int
    private_tokens: int


def _rows_log_probs(engine: EnsembleEngine, block: list[int], rows: list[int]) -> torch.Tensor:
    logits, _ = engine.logits(torch.tensor([block] * len(rows)), torch.tensor(rows))
    return torch.log_softmax(logits.float(), dim=-1)  # (R, T, V)


def evaluate(
    method: str,
    blocks: list[list[int]],
    engine: EnsembleEngine,
    predictor: PMixED | SubMix | None = None,
    adapter: int = 0,
    progress: bool = True,
) -> PerplexityReport:
    """Perplexity over ``blocks`` (each block's first token is context only)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    nll, count, private = 0.0, 0, 0
    for block in tqdm(blocks, desc=f"ppl {method}", unit="block", disable=not progress):
        target = torch.tensor(block[1:])
        if method in ("public", "finetuned", "ensemble"):
            rows = {
                "public": [-1],
                "finetuned": [adapter],
                "ensemble": list(range(engine.n_adapters)),
            }[method]
            lp = _rows_log_probs(engine, block, rows)[:, :-1]
            avg = torch.logsumexp(lp, dim=0) - math.log(len(rows))
            scores = avg.gather(1, target.to(avg.device)[:, None]).squeeze(1).double().cpu()
        elif method == "pmixed":
            assert isinstance(predictor, PMixED)
            scores = predictor.score(block)
            private += len(block) - 1
        else:
            assert isinstance(predictor, SubMix)
            scores, answered = predictor.score(block)
            private += answered
        nll -= float(scores.sum())
        count += len(block) - 1
    return PerplexityReport(method, math.exp(nll / count), count, private)
