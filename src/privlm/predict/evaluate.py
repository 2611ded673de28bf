"""Teacher-forced perplexity of the public model, one adapter, the plain ensemble average,
PMixED and SubMix, on held-out token blocks where every token is one query (as in both
papers). Private methods charge their ledgers like any other query."""

from __future__ import annotations

import math
from dataclasses import dataclass

from privlm.predict.protocol import Predictor
from privlm.progress import progress_bar


@dataclass(frozen=True)
class PerplexityReport:
    method: str
    perplexity: float
    tokens: int
    private_tokens: int


def evaluate(
    predictor: Predictor, blocks: list[list[int]], progress: bool = True
) -> PerplexityReport:
    """Perplexity of ``predictor`` over ``blocks`` (each block's first token is context only;
    a private predictor charges one query per scored token)."""
    nll, count, private = 0.0, 0, 0
    name = predictor.mechanism
    for block in progress_bar(blocks, desc=f"ppl {name}", unit="block", disable=not progress):
        scores = predictor.score(block)
        nll -= float(scores.log_probs.sum())
        count += len(block) - 1
        private += scores.private
    return PerplexityReport(name, math.exp(nll / count), count, private)
