"""SubMix private next-token prediction (Algorithm 2 of SubMix), with per-part budgets.

The ensemble holds two adapters per part (halves a and b). Each query computes the release
distribution and the leakage of every part (:func:`privlm.predict.submix_rule.submix_step`).
If every part can afford its leakage (ε_i − leak_i > 0), all the part ledgers are charged in
one transaction, then the token is released. Otherwise SubMix issues STOP (recorded durably):
this and every later query is answered by the public model alone, and the caller is told.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from privlm.accounting import Charge, PrivacyLedger, RdpCurve, Relation, charge_together
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.config import SubMixConfig as SubMixConfig
from privlm.predict.config import part_ledgers as part_ledgers
from privlm.predict.engine import EnsembleEngine, upcast_log_softmax
from privlm.predict.protocol import Generation, Scores, StreamingPredictor, Token
from privlm.predict.sampling import sample
from privlm.predict.submix_rule import submix_step
from privlm.randomness import PrivacyRandomness, as_randomness

STOP_FLAG = "submix-stop"


class SubMix(StreamingPredictor):
    mechanism = "submix"
    charges_tokens = True

    def __init__(
        self,
        engine: EnsembleEngine,
        tokenizer: PreTrainedTokenizerBase,
        ledgers: list[PrivacyLedger],
        config: SubMixConfig | None = None,
        seed: PrivacyRandomness | int | None = None,
    ) -> None:
        if engine.n_adapters % 2:
            raise PrivlmError("a SubMix ensemble has two adapters per part")
        self.k = engine.n_adapters // 2
        if len(ledgers) != self.k:
            raise PrivlmError(
                f"SubMix over {self.k} parts needs {self.k} part ledgers, got {len(ledgers)}"
            )
        self.engine, self.tokenizer, self.ledgers = engine, tokenizer, ledgers
        self.config = config or SubMixConfig()
        self.rng = as_randomness(seed)  # the OS CSPRNG unless a seed is given

    @property
    def stopped(self) -> bool:
        return self.ledgers[0].flag(STOP_FLAG) is not None

    def _stop(self, why: str) -> None:
        self.ledgers[0].set_flag(STOP_FLAG, why)

    def _query(self, log_probs_all: torch.Tensor) -> tuple[int, bool]:
        """One query: (token, private?). Charges before returning a private token."""
        public = log_probs_all[0]
        if self.stopped:
            return sample(public, self.rng), False
        step = submix_step(
            log_probs_all[1::2], log_probs_all[2::2], public, self.config.alpha, self.config.beta
        )
        token = sample(step.log_probs, self.rng)
        if not self._charge_or_stop(step):
            return sample(public, self.rng), False
        return token, True

    def _charge_or_stop(self, step: Any) -> bool:
        """Charge every part its leakage, all or nothing; on failure issue STOP."""
        remaining = [lg.remaining() for lg in self.ledgers]
        leak = step.leakage.tolist()
        if not all(r - x > 0 for r, x in zip(remaining, leak, strict=True)):
            worst = min(range(self.k), key=lambda i: remaining[i] - leak[i])
            self._stop(
                f"part {worst} would exceed its Rényi operational-privacy budget, RDP "
                f"ε={self.config.epsilon} at order α={self.config.alpha} (per part, a part "
                "removed; not an (ε, δ) figure)"
            )
            return False
        try:
            charge_together(
                [
                    (
                        lg,
                        Charge(
                            self.mechanism,
                            rdp=RdpCurve.from_mapping({self.config.alpha: x}),
                            unit="part",
                            relation=Relation.PART,
                            # no data-dependent values beyond the charge itself (λ* is one)
                            params={"alpha": self.config.alpha, "beta": self.config.beta},
                        ),
                    )
                    for lg, x in zip(self.ledgers, leak, strict=True)
                ]
            )
        except BudgetExceededError as exc:  # a concurrent query spent the budget first
            self._stop(str(exc))
            return False
        return True

    def exhausted(self) -> bool:
        return self.stopped

    def budget(self) -> dict[str, Any]:
        """SubMix's budget is Rényi DP at order α per part (Algorithm 2), shown as such, with
        its (ε, δ) conversion beside it, never as if it were an (ε, δ) pair itself."""
        cfg = self.config
        spent = max(lg.spent().epsilon for lg in self.ledgers)  # RDP at order α
        return {
            "mechanism": self.mechanism,
            "budget": {
                "rdp_epsilon": cfg.epsilon, "order": cfg.alpha, "per": "part",
                "as_dp": {"epsilon": cfg.lifetime_curve().to_dp(cfg.delta).epsilon,
                          "delta": cfg.delta},
            },
            "spent": {
                "rdp_epsilon": spent, "order": cfg.alpha,
                "as_dp": {"epsilon": _as_dp(spent, cfg.alpha, cfg.delta), "delta": cfg.delta},
            },
            "remaining": {"rdp_epsilon": max(cfg.epsilon - spent, 0.0), "order": cfg.alpha},
            "exhausted": self.exhausted(),
            "queries": {"used": self.ledgers[0].count()},
            "relation": "per part: one part removed (operational privacy); not per unit",
            "note": "Rényi operational privacy at order α for each part, a part removed "
            "(SubMix Algorithm 2); not a per-unit guarantee: one unit replaces one half's "
            "model, which this leakage does not bound (docs/sharp_edges.md); as_dp is what "
            "the per-part figure converts to at δ",
        }  # fmt: skip

    def score(self, token_ids: list[int]) -> Scores:
        """Teacher-forced log-probabilities of each next token (one query each); returns
        them and how many were answered privately (the rest by the public model, after STOP)."""
        rows = torch.tensor([-1, *range(self.engine.n_adapters)])
        logits, _ = self.engine.logits(torch.tensor([token_ids] * len(rows)), rows)
        out = torch.empty(len(token_ids) - 1, dtype=torch.float64)
        private = 0
        for t in range(len(token_ids) - 1):
            lp = upcast_log_softmax(logits[:, t])  # float64 before the softmax
            if not self.stopped:
                step = submix_step(lp[1::2], lp[2::2], lp[0], self.config.alpha, self.config.beta)
                if self._charge_or_stop(step):
                    out[t] = step.log_probs[token_ids[t + 1]]
                    private += 1
                    continue
            out[t] = lp[0, token_ids[t + 1]].double()
        return Scores(out, private)

    def _sequence(self, max_new_tokens: int) -> SubMixSequence:
        return SubMixSequence(self, max_new_tokens)

    def stop_note(self) -> str | None:
        """Why later tokens come from the public model (None before STOP)."""
        stop = self.ledgers[0].flag(STOP_FLAG)
        return (
            None if stop is None else f"STOP: {stop}; later tokens come from the public model only"
        )

    def generation(self, released: list[Token], stopped: str | None) -> Generation:
        out = super().generation(released, stopped)
        spent = [lg.spent().epsilon for lg in self.ledgers]
        out.epsilon_spent, out.queries_used = max(spent), self.ledgers[0].count()
        out.extra["part_spent"] = spent
        return out


class SubMixSequence:
    """Private tokens (every part charged first) until STOP, then the public model's
    (``Token.private`` False)."""

    def __init__(self, predictor: SubMix, max_new_tokens: int) -> None:
        self.predictor, self.left = predictor, max_new_tokens
        self.rows = [-1, *range(predictor.engine.n_adapters)]
        self.done = False
        self.stopped: str | None = None

    def choose(self, log_probs: torch.Tensor) -> Token:
        p = self.predictor
        token, was_private = p._query(log_probs)
        self.left -= 1
        self.done = token == p.tokenizer.eos_token_id or self.left == 0
        if self.done:
            self.stopped = p.stop_note()
        return Token(token, was_private)


def _as_dp(rdp_epsilon: float, alpha: float, delta: float) -> float:
    """(α, ε)-RDP converted to ε at δ (0 when nothing is spent)."""
    if rdp_epsilon <= 0:
        return 0.0
    return float(RdpCurve.from_mapping({float(alpha): rdp_epsilon}).to_dp(delta).epsilon)
