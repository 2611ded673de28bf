"""Screened PMixED: a sparse-vector test sends each query to the public model (free) or to a
paid PMixED query (Dwork & Roth 2014, Algorithm 1; the PMixED paper, Algorithm 1).

Per query: the score s = TV(p̄, p₀) of the ensemble's average from the public model (all N
members, float64) is compared, with Laplace noise, with the noisy threshold τ + ρ of the
open sparse-vector instance. Below: the token is sampled from the public model, and costs
nothing beyond the instance. Above: the instance closes, one paid PMixED query (Poisson
subsample, mollified mixture, as :class:`~privlm.predict.pmixed.PMixED`) is charged and
released, and a new instance opens with a fresh threshold noise. The budget (ε, δ) covers c
paid tokens and their c instances; free tokens are unbounded
(:mod:`privlm.accounting.analysis.sparse_vector`; docs/sharp_edges.md, "Screened PMixED").

**Durable state, fail-closed.** An instance is charged to the ledger when it opens, and
its threshold noise ρ is stored in the ledger's flags (never exported) in the same
transaction. Each test runs inside one locked ledger transaction: it reads the open
instance, draws the query noise, and on ⊤ charges the paid query and opens the next
instance, all committed before the token is computed and released. A restart resumes the
open instance with its stored ρ (never redrawn for free, never reused after its ⊤), and
several processes serving one ledger take the test one at a time. When the c paid tokens
are spent, the deployment answers from the public model or refuses, as configured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from privlm.accounting import Budget, Charge, PrivacyLedger, Relation
from privlm.accounting.analysis import pmixed as pmixed_analysis
from privlm.accounting.analysis.sparse_vector import AboveThreshold
from privlm.accounting.ledger import LedgerTransaction
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.config import ScreenedPMixEDConfig
from privlm.predict.engine import EnsembleEngine, upcast_log_softmax
from privlm.predict.pmixed import UNIT
from privlm.predict.pmixed_rule import pmixed_mixture, sample_members
from privlm.predict.protocol import Generation, Scores, StreamingPredictor, Token
from privlm.predict.sampling import sample
from privlm.predict.spending import Spending
from privlm.randomness import PrivacyRandomness, as_randomness

STATE_FLAG = "screened-pmixed-svt"  # the open instance and its threshold noise: secret
INSTANCE = "screened-pmixed-instance"
PAID = "screened-pmixed"


def tv_score(log_probs: torch.Tensor) -> float:
    """TV(p̄, p₀) for rows [public, member 1, …, member N] of log-probabilities, in float64
    (:func:`privlm.accounting.analysis.sparse_vector.screening_score`, on the engine's
    tensors)."""
    p = log_probs.double().exp()
    return float(0.5 * (p[1:].mean(dim=0) - p[0]).abs().sum())


@dataclass(frozen=True)
class SvtState:
    """What the ledger's flag holds: paid tokens released, the open instance (None: none
    open), its threshold noise and the settings that fixed the noise's scale (the
    instance's ε′ and the score's sensitivity Δ), and why no more can open (None while they
    can)."""

    paid: int = 0
    instance: int | None = None
    threshold_noise: float = 0.0
    instances: int = 0
    closed: str | None = None
    instance_epsilon: float | None = None
    sensitivity: float | None = None

    def opened_for(self, test: AboveThreshold) -> bool:
        """Whether the open instance's noise was drawn for ``test``'s ε′ and Δ: an instance
        answers only queries noised at its own scale (AboveThreshold's proof takes one ε′)."""
        return (self.instance_epsilon, self.sensitivity) == (test.epsilon, test.sensitivity)

    def close_instance(self) -> SvtState:
        """The open instance closed without a ⊤: its charge stands, its noise is dropped."""
        return SvtState(self.paid, None, 0.0, self.instances, None)

    @classmethod
    def parse(cls, raw: str | None) -> SvtState:
        return cls() if raw is None else cls(**json.loads(raw))

    def dump(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


@dataclass(frozen=True)
class Answer:
    """One query's outcome: ``paid`` (a charged PMixED mixture), ``free`` (the public model,
    below the threshold) or ``spent`` (no paid token left: ``why``)."""

    kind: str
    log_probs: torch.Tensor | None = None
    why: str | None = None


class ScreenedPMixED(StreamingPredictor):
    """PMixED behind a sparse-vector screen. One ledger per deployment."""

    mechanism = "screened-pmixed"
    charges_tokens = True

    def __init__(
        self,
        engine: EnsembleEngine,
        tokenizer: PreTrainedTokenizerBase,
        ledger: PrivacyLedger,
        config: ScreenedPMixEDConfig | None = None,
        seed: PrivacyRandomness | int | None = None,
    ) -> None:
        self.engine, self.tokenizer, self.ledger = engine, tokenizer, ledger
        self.config = cfg = config or ScreenedPMixEDConfig()
        if ledger.budget != Budget(cfg.epsilon, cfg.delta):
            raise PrivlmError(
                f"ledger {ledger.name!r} has budget {ledger.budget.describe()}, not "
                f"ε={cfg.epsilon} at δ={cfg.delta}"
            )
        others = {c.mechanism for c in ledger.charges()} - {INSTANCE, PAID}
        if others:
            raise PrivlmError(
                f"ledger {ledger.name!r} already holds {', '.join(sorted(others))} charges; a "
                "screened deployment needs a ledger of its own"
            )
        n = engine.n_adapters
        self.radius, self.query_curve = cfg.query_cost(n)
        self.test = cfg.screen(n)
        self.instance_curve = cfg.instance_curve()
        self.rng = as_randomness(seed)  # the OS CSPRNG unless a seed is given
        self.state = SvtState.parse(ledger.flag(STATE_FLAG))

    # -- the test, in one ledger transaction -------------------------------------------------

    def _open(self, tx: LedgerTransaction, state: SvtState) -> SvtState:
        """Charge a new instance and draw its threshold noise, or record why none fits."""
        k = state.instances + 1
        try:
            tx.charge(
                Charge(
                    INSTANCE, rdp=self.instance_curve, unit=UNIT, relation=Relation.UNIT,
                    params={"instance": k, "instance_epsilon": self.test.epsilon,
                            "sensitivity": self.test.sensitivity},
                )
            )  # fmt: skip
        except BudgetExceededError as exc:
            return SvtState(state.paid, None, 0.0, state.instances, str(exc))
        noise = float(self.rng.laplace(self.test.threshold_scale))
        return SvtState(state.paid, k, noise, k, None, self.test.epsilon, self.test.sensitivity)

    def _spent_reason(self, state: SvtState) -> str | None:
        if state.paid >= self.config.paid_tokens:
            return (
                f"all c={self.config.paid_tokens} paid tokens of ledger {self.ledger.name!r} are "
                f"spent (ε={self.config.epsilon}, δ={self.config.delta})"
            )
        return None if state.instance is not None else state.closed

    def _test(self, score: float) -> tuple[str, str | None]:
        """AboveThreshold for one query: ("paid", None) once the paid query is charged (and
        the next instance opened), ("free", None), or ("spent", why); committed, with the
        instance's new state, before it returns."""
        with self.ledger.transaction() as tx:
            state = SvtState.parse(tx.flag(STATE_FLAG))
            if state.instance is not None and not state.opened_for(self.test):
                state = state.close_instance()  # opened under other settings: a fresh one
            if (
                state.instance is None
                and state.closed is None
                and state.paid < self.config.paid_tokens
            ):
                state = self._open(tx, state)
            outcome: tuple[str, str | None]
            why = self._spent_reason(state)
            if why is not None:
                outcome = ("spent", why)
            elif score + float(self.rng.laplace(self.test.query_scale)) < (
                self.config.threshold + state.threshold_noise
            ):
                outcome = ("free", None)
            else:
                state, paid = self._charge_paid(tx, state)
                outcome = ("paid", None) if paid else ("spent", state.closed)
            tx.set_flag(STATE_FLAG, state.dump())
        self.state = state
        return outcome

    def _charge_paid(self, tx: LedgerTransaction, state: SvtState) -> tuple[SvtState, bool]:
        """⊤: the instance closes, the paid query is charged (True) or does not fit (False,
        nothing released), and the next instance opens while paid tokens are left."""
        try:
            tx.charge(
                Charge(
                    PAID, rdp=self.query_curve, unit=UNIT, relation=Relation.UNIT,
                    params={"paid": state.paid + 1, "instance": state.instance,
                            "radius": self.radius, "q": self.config.sample_rate,
                            "alpha": self.config.alpha, "members": self.engine.n_adapters,
                            "bound": pmixed_analysis.REPLACEMENT},
                )
            )  # fmt: skip
        except BudgetExceededError as exc:
            return SvtState(state.paid, None, 0.0, state.instances, str(exc)), False
        after = SvtState(state.paid + 1, None, 0.0, state.instances, None)
        if after.paid < self.config.paid_tokens:
            after = self._open(tx, after)
        return after, True

    def answer(self, log_probs: torch.Tensor) -> Answer:
        """One query on rows [public, members…] of float64 log-probabilities: the test, then
        the release distribution (charged first if paid)."""
        if self.state.paid >= self.config.paid_tokens:
            return Answer("spent", log_probs[0], self._spent_reason(self.state))
        kind, why = self._test(tv_score(log_probs))
        if kind == "free":
            return Answer("free", log_probs[0].double())
        if kind == "spent":
            return Answer("spent", log_probs[0], why)
        members = sample_members(self.rng, self.engine.n_adapters, self.config.sample_rate)
        mix = pmixed_mixture(
            log_probs[1:], log_probs[0], self.config.alpha, self.radius, members
        )  # the same work whatever the secret subset (pmixed_rule)
        return Answer("paid", mix.log_probs)

    # -- budget ------------------------------------------------------------------------------

    def queries_used(self) -> int:
        return self.state.paid

    def queries_left(self) -> int:
        return max(self.config.paid_tokens - self.state.paid, 0)

    def exhausted(self) -> bool:
        """No paid token can be released (free tokens may still be, when configured)."""
        return self._spent_reason(self.state) is not None

    def check_can_start(self) -> None:
        if self.exhausted() and self.config.when_spent == "refuse":
            raise BudgetExceededError(
                f"refused: {self._spent_reason(self.state)}; this deployment answers no further "
                "queries (when_spent=refuse)"
            )

    def budget(self) -> dict[str, Any]:
        """(ε, δ) over c paid tokens and any number of free ones."""
        cfg, spent = self.config, self.ledger.spent().epsilon
        return {
            "mechanism": self.mechanism,
            "relation": pmixed_analysis.relation(pmixed_analysis.REPLACEMENT),
            "radius": self.radius,
            "screen": {
                "score": "TV(ensemble average, public model)",
                "sensitivity": self.test.sensitivity,
                "threshold": cfg.threshold,
                "instance_epsilon": self.test.epsilon,
                "laplace_scales": {
                    "threshold": self.test.threshold_scale,
                    "score": self.test.query_scale,
                },
            },
            "budget": {"epsilon": cfg.epsilon, "delta": cfg.delta},
            "spent": {"epsilon": spent, "delta": cfg.delta},
            "remaining": {"epsilon": max(cfg.epsilon - spent, 0.0)},
            "exhausted": self.exhausted(),
            "when_spent": cfg.when_spent,
            "queries": {
                "used": self.queries_used(),
                "total": cfg.paid_tokens,
                "left": self.queries_left(),
            },
            "growth": Spending.of(
                self.instance_curve + self.query_curve, cfg.delta, cfg.epsilon, cfg.paid_tokens
            ).view(),
            "note": "(ε, δ)-DP per unit of the dataset (one unit replaces one ensemble "
            "member's model) over all c paid tokens and any number of free ones: a "
            "sparse-vector test on TV(ensemble average, public model) sends each query to the "
            "public model (free) or to a paid PMixED query (docs/sharp_edges.md, 'Screened "
            "PMixED').",
        }

    def generation(self, released: list[Token], stopped: str | None) -> Generation:
        out = super().generation(released, stopped)
        out.epsilon_spent = self.ledger.spent().epsilon
        out.queries_used, out.queries_left = self.queries_used(), self.queries_left()
        out.extra["free_tokens"] = sum(t.free for t in released)
        out.extra["paid_tokens"] = sum(t.private and not t.free for t in released)
        return out

    def _sequence(self, max_new_tokens: int) -> ScreenedSequence:
        return ScreenedSequence(self, max_new_tokens)

    def score(self, token_ids: list[int]) -> Scores:
        """Teacher-forced log-probability of each token given its prefix, every position one
        query through the screen (free, paid, or the public model once spent if configured)."""
        if len(token_ids) < 2:
            raise PrivlmError("scoring needs at least two tokens")
        rows = torch.tensor([-1, *range(self.engine.n_adapters)])
        logits, _ = self.engine.logits(torch.tensor([token_ids] * len(rows)), rows)
        need = len(token_ids) - 1
        out = torch.empty(need, dtype=torch.float64)
        private = 0
        for t in range(need):
            ans = self.answer(upcast_log_softmax(logits[:, t]))
            if ans.kind == "spent" and self.config.when_spent == "refuse":
                raise BudgetExceededError(f"refused at token {t + 1} of {need}: {ans.why}")
            assert ans.log_probs is not None
            out[t] = ans.log_probs[token_ids[t + 1]]
            private += ans.kind != "spent"
        return Scores(out, private)


class ScreenedSequence:
    """Tokens through the screen: every row (public and all members) is evaluated while paid
    tokens are left, since the score reads them all; the public row alone after that."""

    def __init__(self, predictor: ScreenedPMixED, max_new_tokens: int) -> None:
        self.predictor, self.left = predictor, max_new_tokens
        spent = predictor.exhausted()
        self.rows = [-1] if spent else [-1, *range(predictor.engine.n_adapters)]
        self.done = False
        self.stopped: str | None = None

    def choose(self, log_probs: torch.Tensor) -> Token | None:
        p = self.predictor
        if len(self.rows) == 1:
            ans = Answer("spent", log_probs[0], p._spent_reason(p.state))
        else:
            ans = p.answer(log_probs)
        if ans.kind == "spent":
            self.rows = [-1]
            if p.config.when_spent == "refuse":
                self.done, self.stopped = True, f"refused: {ans.why}"
                return None
        assert ans.log_probs is not None
        token = sample(ans.log_probs, p.rng)
        self.left -= 1
        self.done = token == p.tokenizer.eos_token_id or self.left == 0
        if ans.kind == "spent":
            return Token(token, False)  # the public model, once the paid tokens are spent
        return Token(token, True, free=ans.kind == "free")
