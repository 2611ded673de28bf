"""PMixED private next-token prediction (Algorithm 1 of the PMixED paper), with its ledger.

Per query: Poisson-sample the ensemble (rate q), evaluate the public model and the sampled
adapters in one batched pass, mollify each toward the public model (Eq. 5, order-2α ball of
radius ρ*), average and sample. The cost of every query is the per-query RDP curve of
:mod:`privlm.accounting.analysis.pmixed` and is charged to the ledger, durably, before the
token is released. The budget (ε_G, δ) is spent over T queries: ε_G is converted to an RDP
budget at α by Theorem C.3, and ρ* is chosen so one query costs at most that over T.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from transformers import PreTrainedTokenizerBase

from privlm.accounting import Budget, Charge, PrivacyLedger, RdpCurve, Relation
from privlm.accounting.analysis import pmixed as analysis
from privlm.accounting.ledger import ChargeRecord
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.config import PMixEDConfig as PMixEDConfig
from privlm.predict.config import rdp_budget_for as rdp_budget_for
from privlm.predict.engine import EnsembleEngine, upcast_log_softmax
from privlm.predict.pmixed_rule import pmixed_mixture, sample_members
from privlm.predict.protocol import Generation, Scores, StreamingPredictor, Token
from privlm.predict.sampling import sample
from privlm.predict.spending import Spending
from privlm.randomness import PrivacyRandomness, as_randomness

CORRECTION = "pmixed-per-unit-restatement"
UNIT = "unit of the dataset (one ensemble member replaced)"


def released_alpha(record: ChargeRecord, grid: tuple[float, ...]) -> int:
    """The order α a PMixED token was released at: recorded with its charge, or, for a
    charge from before α was recorded, the largest integer order its stored curve is finite
    at (a PMixED query's curve covers exactly the orders 2..α: its ball is at order 2α)."""
    if "alpha" in record.params:
        return analysis.check_alpha(float(record.params["alpha"]))
    finite = [
        a for a, e in zip(grid, record.rdp or (), strict=False)
        if a >= 2 and a == int(a) and math.isfinite(e)
    ]  # fmt: skip
    if not finite:
        raise PrivlmError(f"PMixED charge #{record.seq} holds no curve to restate")
    return int(max(finite))


def per_unit_rdp(
    records: list[ChargeRecord], ledger: PrivacyLedger, n_models: int
) -> NDArray[np.float64]:
    """What released PMixED tokens cost per unit (the replacement bound: one member of
    ``n_models`` replaced), each at the radius, q and order α it was released with, summed
    on the ledger's order grid (∞ at orders a token's α does not cover)."""
    grid = ledger.orders
    kinds = Counter(
        (float(r.params["radius"]), float(r.params["q"]), released_alpha(r, grid)) for r in records
    )
    total = np.zeros(len(grid))
    for (radius, q, alpha), count in kinds.items():
        curve = analysis.query_rdp_curve(radius, alpha, n_models, q)
        total = total + count * RdpCurve.from_mapping(curve).at(grid)
    return total


def shortfall(restated: NDArray[np.float64], recorded: NDArray[np.float64]) -> NDArray[np.float64]:
    """``restated`` − ``recorded`` per order of a grid (both arrays), never negative, and ∞
    where the restatement is (an order its tokens' bound does not cover): the charge that
    makes a record of ``recorded`` true."""
    with np.errstate(invalid="ignore"):  # ∞ − ∞ where neither covers an order
        extra = np.where(np.isinf(restated), np.inf, np.maximum(restated - recorded, 0.0))
    return np.asarray(extra, dtype=np.float64)


def legacy_restatement(
    ledger: PrivacyLedger, cfg: PMixEDConfig, n_models: int
) -> tuple[str | None, float | None] | None:
    """Restate a ledger's PMixED charges made under a per-part bound (or before bounds were
    recorded) under the per-unit replacement bound, at the radius and order each query used.

    Returns None when there is nothing to restate; otherwise (refusal, radius): the
    difference is recorded once, durably (``pmixed-per-unit-restatement``), and the radius
    spreads what is left of the RDP budget at α over the queries left. If the difference
    does not fit the budget, it is recorded all the same, as an overdraft (the tokens were
    released: the record must say what they cost), and ``refusal`` says why no further
    token is released."""
    records = ledger.charges()
    if not any(r.mechanism == CORRECTION for r in records):
        old = [
            r for r in records
            if r.mechanism == PMixED.mechanism and r.params.get("bound") != analysis.REPLACEMENT
        ]  # fmt: skip
        if not old:
            return None
        grid = ledger.orders
        extra = shortfall(per_unit_rdp(old, ledger, n_models), ledger.recorded_rdp(old, grid))
        charge = Charge(
            CORRECTION,
            rdp=RdpCurve.from_arrays(grid, extra),
            unit=UNIT,
            relation=Relation.UNIT,
            params={"queries_restated": len(old), "members": n_models},
        )
        try:
            ledger.charge(charge)
        except BudgetExceededError:
            why = (
                f"{len(old)} PMixED tokens released under the per-part bound, which does not "
                "cover what one unit changes (one member replaced), cost more than the budget "
                f"ε={cfg.epsilon} at δ={cfg.delta} once restated per unit (docs/sharp_edges.md)"
            )
            ledger.record_overdraft(charge, why)
            return f"refused: ledger {ledger.name!r}: {why}; no further private tokens", None
        records = ledger.charges()
    return _radius_left(ledger, cfg, n_models, records)


def _radius_left(
    ledger: PrivacyLedger, cfg: PMixEDConfig, n_models: int, records: list[Any]
) -> tuple[str | None, float | None]:
    """The radius for the queries left once a ledger's legacy charges are restated: what
    the ledger has recorded at α (restatement included) against the RDP budget at α."""
    used = sum(r.mechanism == PMixED.mechanism for r in records)
    spent = float(ledger.recorded_rdp(records, [float(cfg.alpha)])[0])
    left_rdp = rdp_budget_for(cfg.epsilon, cfg.delta, cfg.alpha) - spent
    if used >= cfg.queries or left_rdp <= 0:
        return (
            f"refused: ledger {ledger.name!r} has no per-unit budget left: its tokens released "
            "under the per-part bound, recomputed under the per-unit bound (one member "
            "replaced), use what remains (docs/sharp_edges.md)",
            None,
        )
    radius = analysis.solve_radius(
        left_rdp / (cfg.queries - used), cfg.alpha, n_models, cfg.sample_rate,
        lambda_cap=cfg.lambda_cap,
    )  # fmt: skip
    return None, radius


class PMixED(StreamingPredictor):
    """Private prediction over an ensemble of LoRA adapters. One ledger per deployment."""

    mechanism = "pmixed"
    charges_tokens = True

    def __init__(
        self,
        engine: EnsembleEngine,
        tokenizer: PreTrainedTokenizerBase,
        ledger: PrivacyLedger,
        config: PMixEDConfig | None = None,
        seed: PrivacyRandomness | int | None = None,
    ) -> None:
        self.engine, self.tokenizer, self.ledger = engine, tokenizer, ledger
        self.config = cfg = config or PMixEDConfig()
        analysis.check_per_unit(cfg.bound)  # a ledger is per unit: never a per-part charge
        if ledger.budget != Budget(cfg.epsilon, cfg.delta):
            raise PrivlmError(
                f"ledger {ledger.name!r} has budget {ledger.budget.describe()}, not ε={cfg.epsilon} at δ={cfg.delta}"
            )
        self.refusal: str | None = None
        self.radius, self.query_curve = cfg.query_cost(engine.n_adapters)
        self._restate_legacy_charges()
        # the ledger's charges other than tokens (a restatement), counted once, not per token
        self._restatements = sum(c.mechanism == CORRECTION for c in ledger.charges())
        self.rng = as_randomness(seed)  # the OS CSPRNG unless a seed is given

    def _restate_legacy_charges(self) -> None:
        """Tokens released under a per-part bound (ledgers written before the per-unit bound)
        are recomputed under it: the difference is charged durably, and the rest of the
        budget is spread over the queries left, at the radius that fits. If the recomputed
        spending does not fit the budget, every further token is refused, with the reason."""
        restated = legacy_restatement(self.ledger, self.config, self.engine.n_adapters)
        if restated is None:
            return
        self.refusal, radius = restated
        if radius is not None:
            self.radius = radius
            curve = analysis.query_rdp_curve(
                radius, self.config.alpha, self.engine.n_adapters, self.config.sample_rate,
                lambda_cap=self.config.lambda_cap,
            )  # fmt: skip
            self.query_curve = RdpCurve.from_mapping(curve)

    # -- budget ------------------------------------------------------------------------------

    def queries_used(self) -> int:
        return self.ledger.count() - self._restatements

    def queries_left(self) -> int:
        return max(self.config.queries - self.queries_used(), 0)

    def _charge_one(self) -> None:
        """Charge one query, durably, or refuse. Called before a token leaves."""
        used = self.queries_used()
        if self.refusal is not None:
            raise BudgetExceededError(self.refusal)
        if used >= self.config.queries:
            raise BudgetExceededError(
                f"refused: all T={self.config.queries} private queries of ledger {self.ledger.name!r} "
                f"are used (ε={self.config.epsilon}, δ={self.config.delta}); no further private tokens"
            )
        self.ledger.charge(
            Charge(
                self.mechanism,
                rdp=self.query_curve,
                unit=UNIT,
                relation=Relation.UNIT,
                params={
                    "query": used + 1,
                    "radius": self.radius,
                    "q": self.config.sample_rate,
                    "alpha": self.config.alpha,
                    "members": self.engine.n_adapters,
                    "bound": self.config.bound,
                    "lambda_cap": self.config.lambda_cap,
                },
            )
        )

    # -- one query ---------------------------------------------------------------------------

    def release(self, log_probs_all: torch.Tensor) -> torch.Tensor:
        """One query's release distribution from rows [public, member 1, …, member N]: a
        fresh Poisson subset, and the same work whatever it is (:mod:`pmixed_rule`)."""
        members = sample_members(self.rng, self.engine.n_adapters, self.config.sample_rate)
        mix = pmixed_mixture(
            log_probs_all[1:], log_probs_all[0], self.config.alpha, self.radius, members,
            lambda_cap=self.config.lambda_cap,
        )  # fmt: skip
        return mix.log_probs

    def exhausted(self) -> bool:
        return self.queries_left() < 1 or self.refusal is not None

    def budget(self) -> dict[str, Any]:
        """(ε, δ) over all T queries: budget, spent, what is left, and the queries."""
        cfg, spent = self.config, self.ledger.spent().epsilon
        return {
            "mechanism": self.mechanism,
            "relation": analysis.relation(cfg.bound),
            "radius": self.radius,
            "budget": {"epsilon": cfg.epsilon, "delta": cfg.delta},
            "spent": {"epsilon": spent, "delta": cfg.delta},
            "remaining": {"epsilon": max(cfg.epsilon - spent, 0.0)},
            "exhausted": self.exhausted(),
            "queries": {
                "used": self.queries_used(), "total": cfg.queries, "left": self.queries_left()
            },
            "growth": Spending.of(self.query_curve, cfg.delta, cfg.epsilon, cfg.queries).view(),
            "note": "(ε, δ)-DP per unit of the dataset (one unit replaces one ensemble "
            "member's model) over all T queries. Even one query shows a large ε: the "
            "RDP-to-(ε, δ) conversion adds about log(1/δ)/(α−1) at the first query, and "
            "little after it.",
        }  # fmt: skip

    def check_can_start(self) -> None:
        """Refuse a stream at once when no query is left."""
        if self.queries_left() < 1:
            self._charge_one()  # raises with the reason

    def _sequence(self, max_new_tokens: int) -> PMixEDSequence:
        return PMixEDSequence(self, max_new_tokens)

    def generation(self, released: list[Token], stopped: str | None) -> Generation:
        out = super().generation(released, stopped)
        out.epsilon_spent = self.ledger.spent().epsilon
        out.queries_used, out.queries_left = self.queries_used(), self.queries_left()
        return out

    def score(self, token_ids: list[int]) -> Scores:
        """Teacher-forced: log-probability of each token given its prefix, every position one
        charged query (the papers' perplexity protocol): len(token_ids) − 1 values."""
        if len(token_ids) < 2:
            raise PrivlmError("scoring needs at least two tokens")
        need = len(token_ids) - 1
        if self.queries_left() < need:
            raise BudgetExceededError(
                f"refused: scoring {need} tokens needs {need} queries, {self.queries_left()} are left "
                f"of T={self.config.queries}"
            )
        rows = torch.tensor([-1, *range(self.engine.n_adapters)])
        ids = torch.tensor([token_ids] * len(rows))
        logits, _ = self.engine.logits(ids, rows)
        out = torch.empty(need, dtype=torch.float64)
        for t in range(need):  # each position upcast before its softmax (float64)
            mixed = self.release(upcast_log_softmax(logits[:, t]))
            self._charge_one()
            out[t] = mixed[token_ids[t + 1]]
        return Scores(out, need)


class PMixEDSequence:
    """Private tokens, each charged (one query) before it is released.

    Every member's row is evaluated at every step, whatever the step's Poisson subset: the
    subset is secret, and a batch that shrank when no step needed a member any more would
    tell it by its duration (docs/sharp_edges.md, "What must stay secret beside the
    output")."""

    def __init__(self, predictor: PMixED, max_new_tokens: int) -> None:
        self.predictor, self.max_new_tokens, self.t = predictor, max_new_tokens, 0
        self.rows = [-1, *range(predictor.engine.n_adapters)]
        self.done = False
        self.stopped: str | None = None

    def choose(self, log_probs: torch.Tensor) -> Token | None:
        p, t = self.predictor, self.t
        token = sample(p.release(log_probs), p.rng)
        try:
            p._charge_one()
        except BudgetExceededError as exc:
            self.done, self.stopped = True, str(exc)
            return None
        self.done = token == p.tokenizer.eos_token_id or t == self.max_new_tokens - 1
        self.t += 1
        return Token(token, True)  # released only now that its cost is committed
