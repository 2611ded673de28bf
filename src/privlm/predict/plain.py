"""Predictors that charge nothing per token: the public model, one DP-trained adapter, or the
plain average of an ensemble's adapters (a non-private baseline, never served).

Their tokens carry no per-token privacy cost: the public model knows nothing private, and a
DP-trained adapter's tokens are post-processing of a release whose ε was charged when it was
trained (its ``statement``). The plain ensemble average is *not* private: privlm uses it only
to measure utility (``eval ppl --method ensemble``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from privlm.errors import PrivlmError
from privlm.predict.engine import EnsembleEngine
from privlm.predict.protocol import Scores, StreamingPredictor, Token
from privlm.predict.sampling import sample
from privlm.randomness import PrivacyRandomness, as_randomness


class PlainPredictor(StreamingPredictor):
    """Ancestral sampling from the average of some engine rows (−1: the public model)."""

    charges_tokens = False

    def __init__(
        self,
        engine: EnsembleEngine,
        tokenizer: Any,
        rows: list[int],
        mechanism: str,
        statement: dict[str, Any] | None = None,
        seed: PrivacyRandomness | int | None = None,
    ) -> None:
        if not rows:
            raise PrivlmError("a predictor needs at least one model")
        self.engine, self.tokenizer, self.rows = engine, tokenizer, rows
        self.mechanism, self.statement = mechanism, statement or {}
        self.rng = as_randomness(seed)

    def exhausted(self) -> bool:
        return False

    def budget(self) -> dict[str, Any]:
        sdp = self.statement.get("guarantee_kind") == "SDP"
        note = {
            "public": "the public model: its answers reveal nothing private",
            "adapter": "a JFT adapter: selective DP (SDP) under its policy, not DP; its tokens "
            "are post-processing and cost nothing more"
            if sdp
            else "a DP-trained adapter: its tokens are post-processing and cost nothing",
        }.get(self.mechanism, "not private: a utility baseline, never served")
        return {
            "mechanism": self.mechanism,
            "per_token_cost": 0.0,
            "training": self.statement,
            "note": note,
        }

    def _average(self, log_probs: torch.Tensor) -> torch.Tensor:
        """The mixture of the rows' next-token distributions, in log space."""
        return torch.logsumexp(log_probs.double(), dim=0) - math.log(len(self.rows))

    def _sequence(self, max_new_tokens: int) -> PlainSequence:
        return PlainSequence(self, max_new_tokens)

    def score(self, token_ids: list[int]) -> Scores:
        """Log-probability of each token given its prefix, under the rows' average."""
        if len(token_ids) < 2:
            raise PrivlmError("scoring needs at least two tokens")
        with torch.no_grad():
            logits, _ = self.engine.logits(
                torch.tensor([token_ids] * len(self.rows)), torch.tensor(self.rows)
            )
            lp = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
            avg = torch.logsumexp(lp, dim=0) - math.log(len(self.rows))
            target = torch.tensor(token_ids[1:], device=avg.device)
            scores = avg.gather(1, target[:, None]).squeeze(1).double().cpu()
        return Scores(scores, 0)


class PlainSequence:
    """Ancestral sampling from the rows' average, one token per step (free: no charge)."""

    def __init__(self, predictor: PlainPredictor, max_new_tokens: int) -> None:
        self.predictor, self.left = predictor, max_new_tokens
        self.rows = list(predictor.rows)
        self.done = False
        self.stopped: str | None = None

    def choose(self, log_probs: torch.Tensor) -> Token:
        p = self.predictor
        token = sample(p._average(log_probs), p.rng)
        self.left -= 1
        self.done = token == p.tokenizer.eos_token_id or self.left == 0
        return Token(token, False)
