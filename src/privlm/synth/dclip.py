"""DClip: InvisibleInk's per-token exponential mechanism (Vinod et al. 2025), as privlm
proves it for one member replaced.

Per token, with p₀ the public model and p_1..p_M the batch's in-context members:

    u(v) = log p₀(v) + (1/M) Σ_i clip(log p_i(v) − log p₀(v), −C, C)
    S    = {v : log p₀(v) ≥ log p₀(v_k) − 2C}        (v_k: p₀'s k-th most likely token)
    release v ~ softmax(u) on S

**What one unit changes.** One unit changes one member's records (:mod:`privlm.synth.
batches`), so one clipped difference moves anywhere in [−C, C]: u moves by s(v) with
|s(v)| ≤ Δ = 2C/M at every v. S is a function of p₀ alone (InvisibleInk's top-k⁺: a token
outside it has u(v) ≤ log p₀(v_k) − C, below every top-k token's floor log p₀ − C), so
it is the same on both sides and costs nothing.

**The loss.** The log-ratio of the two releases at v is s(v) − log E_{P'}[e^{s}], so it
lies in an interval of width at most max s − min s ≤ 2Δ: the mechanism is 2Δ-bounded-range,
and a η-bounded-range mechanism is η²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2; the
exponential mechanism's case of Dong, Durfee & Rogers 2020). So one token is ρ = Δ²/2 =
2C²/M² zCDP, i.e. (a, aρ)-RDP at every order a > 1; L tokens compose adaptively to
(a, aLρ). C is calibrated so that L tokens convert (Theorem C.3, the ledger's conversion)
to exactly the budget (ε, δ) (:mod:`privlm.accounting.analysis.bounded_range`). ``tests/synth/test_dclip.py`` checks the per-token bound
against exact Rényi divergences of enumerated worst cases (each member's difference at ±C).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from privlm.accounting import PrivacyLedger, RdpCurve
from privlm.predict.protocol import StreamingPredictor
from privlm.randomness import PrivacyRandomness


def candidates(log_p0: torch.Tensor, clip: float, top_k: int) -> torch.Tensor:
    """S: p₀'s top-k, expanded to every token within 2C of the k-th (public: p₀ only)."""
    k = min(int(top_k), log_p0.shape[-1])
    kth = torch.topk(log_p0, k).values[-1]
    return log_p0 >= kth - 2.0 * clip


def dclip_log_probs(
    log_p: torch.Tensor, log_p0: torch.Tensor, clip: float, top_k: int
) -> torch.Tensor:
    """The release distribution (float64 log-probabilities, −∞ outside S) from the members'
    ``log_p`` (M, V) and the public ``log_p0`` (V,): the module docstring's u on S."""
    x0 = log_p0.double()
    diff = (log_p.double() - x0).clamp(-clip, clip)  # −∞ − (−∞) = nan never: p₀ > 0
    diff = torch.nan_to_num(diff, nan=-clip)
    u = x0 + diff.mean(dim=0)
    u = torch.where(candidates(x0, clip, top_k), u, torch.full_like(u, -math.inf))
    return torch.log_softmax(u, dim=-1)


class DClipSequence:
    """One text's tokens under DClip, each charged to the text's ledger before it leaves
    (every member's row is evaluated at every step, as PMixED's)."""

    def __init__(self, predictor: DClipPredictor, max_new_tokens: int) -> None:
        self.predictor, self.max_new_tokens, self.t = predictor, max_new_tokens, 0
        self.rows = [-1, *range(predictor.engine.n_adapters)]
        self.done = False
        self.stopped: str | None = None

    def choose(self, log_probs: torch.Tensor) -> Any:
        from privlm.errors import BudgetExceededError
        from privlm.predict.protocol import Token
        from privlm.predict.sampling import sample

        p = self.predictor
        token = sample(dclip_log_probs(log_probs[1:], log_probs[0], p.clip, p.top_k), p.rng)
        try:
            p.charge_one()
        except BudgetExceededError as exc:
            self.done, self.stopped = True, str(exc)
            return None
        self.done = token == p.tokenizer.eos_token_id or self.t == self.max_new_tokens - 1
        self.t += 1
        return Token(token, True)


class DClipPredictor(StreamingPredictor):
    """DClip over an in-context engine, charging each token's ρ to one text's ledger."""

    mechanism = "synth-dclip"

    def __init__(
        self,
        engine: Any,
        tokenizer: Any,
        ledger: PrivacyLedger,
        clip: float,
        top_k: int,
        tokens: int,
        curve: RdpCurve,
        rng: PrivacyRandomness,
    ) -> None:
        """``curve``: one token's RDP curve (:meth:`privlm.synth.config.SynthConfig.token_curve`)."""
        self.engine, self.tokenizer, self.ledger = engine, tokenizer, ledger
        self.clip, self.top_k, self.tokens, self.rng = clip, top_k, tokens, rng
        self.curve = curve

    def charge_one(self) -> None:
        """Charge one token durably, or refuse (the text's ``tokens`` are all used)."""
        from privlm.accounting import Charge, Relation
        from privlm.errors import BudgetExceededError

        used = self.ledger.count()
        if used >= self.tokens:
            raise BudgetExceededError(
                f"refused: all {self.tokens} tokens of ledger {self.ledger.name!r} are used"
            )
        self.ledger.charge(Charge(
            self.mechanism, rdp=self.curve, unit="unit (one member's records replaced)",
            relation=Relation.UNIT,
            params={"token": used + 1, "clip": self.clip, "members": self.engine.n_adapters,
                    "top_k": self.top_k},
        ))  # fmt: skip

    def check_can_start(self) -> None:
        if self.ledger.count() >= self.tokens:
            self.charge_one()  # raises with the reason

    def _sequence(self, max_new_tokens: int) -> DClipSequence:
        return DClipSequence(self, max_new_tokens)
