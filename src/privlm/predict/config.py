"""The settings of private prediction, one definition each (``privlm.config``): PMixED
(Flemings et al. 2024, Table 1) and SubMix (Ginart et al. 2022). They import no torch, so
``privlm generate --help``, ``privlm plan`` and the service's request models read them
without loading a model library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privlm.accounting.analysis import pmixed_bounds as bounds
from privlm.config import check_settings, setting
from privlm.errors import PrivlmError

if TYPE_CHECKING:  # the analysis loads NumPy: imported where a cost is computed
    from privlm.accounting import RdpCurve
    from privlm.accounting.analysis import sparse_vector

# the non-private baselines `privlm eval ppl --method` scores beside the private mechanisms
# (privlm.predict.mechanisms)
BASELINES = ("public", "finetuned", "ensemble")
WHEN_SPENT = ("public", "refuse")
PLAIN_MEMBERS = ("public", "adapter", "ensemble")


def rdp_budget_for(epsilon: float, delta: float, alpha: int) -> float:
    """The (α, ε_RDP) budget that Theorem C.3 converts to exactly (ε, δ)-DP."""
    a = float(alpha)
    return epsilon - math.log((a - 1) / a) + (math.log(delta) + math.log(a)) / (a - 1)


@dataclass(frozen=True, kw_only=True)
class PMixEDConfig:
    """Privacy hyperparameters; defaults are Table 1 of the PMixED paper, but q (below)."""

    epsilon: float = setting(8.0, "PMixED: ε_G of all T queries, at δ", gt=0, le=1000)
    delta: float = setting(1e-5, "δ", gt=0, lt=1)
    alpha: int = setting(3, "PMixED: Rényi order α (an integer)", ge=2, le=256)
    queries: int = setting(1024, "T, private queries over the budget's life", ge=1, le=10**7)
    # q = 1 by default, not the paper's 0.03: under the per-unit bound q barely moves the
    # radius at N ≥ 80 (0.833 at q = 0.03, 0.775 at q ≥ 0.1), the work per query is the same
    # at every q (every member is solved while the subset is secret), and averaging every
    # member beat 2.4 sampled ones on bench_utility (docs/results.md, "The sampling rate q");
    # with q = 1 there is no secret subset at all
    sample_rate: float = setting(
        1.0,
        "PMixED: Poisson sampling rate q of the ensemble (1: every member in every query; "
        "a small q buys a larger radius only for a small ensemble: see privlm plan pmixed)",
        gt=0, le=1,
    )  # fmt: skip
    lambda_cap: float = setting(
        1.0,
        "PMixED: the largest weight λ a member's model may take in its mixture with the "
        "public model (1: the paper's rule). Below 1 every member keeps a share of the "
        "public model, which the per-unit bound turns into a larger radius: worth it when "
        "members sit far from the public model (in-context members); see privlm plan pmixed",
        gt=0, le=1,
    )  # fmt: skip
    bound: str = setting(
        bounds.DEFAULT_BOUND,
        "PMixED: the per-query bound. replacement: per unit (one unit changes one member's "
        "model), the only one charged to a ledger; expansion or jensen: the paper's per-part "
        "relation (one member added or removed), for plan's comparisons only",
        choices=bounds.BOUNDS,
    )

    def __post_init__(self) -> None:
        check_settings(self)  # the declared bounds first: δ in (0, 1), ε in (0, 1000], …
        bounds.check_alpha(self.alpha)
        bounds.check_bound(self.bound)
        if self.queries < 1:
            raise PrivlmError("the query budget T must be at least 1")
        if not (0 < self.sample_rate <= 1):
            raise PrivlmError(f"the sample rate q must lie in (0, 1], got {self.sample_rate}")
        if rdp_budget_for(self.epsilon, self.delta, self.alpha) <= 0:
            raise PrivlmError(
                f"ε={self.epsilon} at δ={self.delta} leaves no RDP budget at order α={self.alpha}; "
                "raise ε or δ, or change α"
            )

    @property
    def per_query_rdp(self) -> float:
        return rdp_budget_for(self.epsilon, self.delta, self.alpha) / self.queries

    def query_cost(self, n_models: int) -> tuple[float, RdpCurve]:
        """The radius ρ* for an ensemble of ``n_models``, and one query's RDP curve there."""
        from privlm.accounting import RdpCurve
        from privlm.accounting.analysis import pmixed as analysis

        radius = analysis.solve_radius(
            self.per_query_rdp, self.alpha, n_models, self.sample_rate, bound=self.bound,
            lambda_cap=self.lambda_cap,
        )  # fmt: skip
        curve = analysis.query_rdp_curve(
            radius, self.alpha, n_models, self.sample_rate, self.bound, self.lambda_cap
        )
        return radius, RdpCurve.from_mapping(curve)

    def lifetime_curve(self, n_models: int) -> RdpCurve:
        """What all T queries can cost together: the most a deployment can ever release,
        reserved on the dataset's ledger when the deployment is created."""
        return self.query_cost(n_models)[1].times(self.queries)


@dataclass(frozen=True, kw_only=True)
class ScreenedPMixEDConfig:
    """Screened PMixED: a sparse-vector test (AboveThreshold) on the score TV(p̄, p₀) sends
    each query to the public model (free) or to a paid PMixED query; the budget (ε, δ)
    covers ``paid_tokens`` paid queries and their instances of the test, and any number of
    free tokens (:mod:`privlm.accounting.analysis.sparse_vector`; docs/sharp_edges.md,
    "Screened PMixED")."""

    epsilon: float = setting(8.0, "Screened PMixED: ε of the whole deployment, at δ", gt=0, le=1000)
    delta: float = setting(1e-5, "δ", gt=0, lt=1)
    alpha: int = setting(3, "Screened PMixED: Rényi order α (an integer)", ge=2, le=256)
    paid_tokens: int = setting(
        256, "c, the paid (private) tokens the budget covers; free tokens are unbounded",
        ge=1, le=10**7,
    )  # fmt: skip
    sample_rate: float = setting(
        0.03, "Screened PMixED: Poisson sampling rate q of a paid query", gt=0, le=1
    )
    threshold: float = setting(
        0.2, "τ: a query whose noisy score TV(ensemble average, public) is below the noisy "
        "threshold is answered by the public model, free (above 1, only the noise can send "
        "a query to a paid token: a rate control)", ge=0, le=10,
    )  # fmt: skip
    svt_share: float = setting(
        0.5, "the share of each paid token's RDP budget spent on its sparse-vector instance "
        "(the rest on its PMixED query)", gt=0, lt=1,
    )  # fmt: skip
    when_spent: str = setting(
        "public", "once the c paid tokens are spent: answer from the public model only, or "
        "refuse", choices=WHEN_SPENT,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_settings(self)
        bounds.check_alpha(self.alpha)
        if rdp_budget_for(self.epsilon, self.delta, self.alpha) <= 0:
            raise PrivlmError(
                f"ε={self.epsilon} at δ={self.delta} leaves no RDP budget at order α={self.alpha}; "
                "raise ε or δ, or change α"
            )

    @property
    def bound(self) -> str:
        return bounds.REPLACEMENT  # per unit, always

    def split(self) -> tuple[float, float]:
        """(ε′ of each sparse-vector instance, each paid query's RDP budget at α)."""
        from privlm.accounting.analysis import sparse_vector

        return sparse_vector.split_budget(
            rdp_budget_for(self.epsilon, self.delta, self.alpha), self.paid_tokens,
            self.alpha, self.svt_share,
        )  # fmt: skip

    def screen(self, n_models: int) -> sparse_vector.AboveThreshold:
        """The test's noise scales for an ensemble of ``n_models`` (Δ = 1/N)."""
        from privlm.accounting.analysis import sparse_vector

        return sparse_vector.AboveThreshold(
            self.split()[0], sparse_vector.score_sensitivity(n_models)
        )

    def query_cost(self, n_models: int) -> tuple[float, RdpCurve]:
        """The radius ρ* of a paid query, and its RDP curve (per unit)."""
        from privlm.accounting import RdpCurve
        from privlm.accounting.analysis import pmixed as analysis

        radius = analysis.solve_radius(self.split()[1], self.alpha, n_models, self.sample_rate)
        return radius, RdpCurve.from_mapping(
            analysis.query_rdp_curve(radius, self.alpha, n_models, self.sample_rate)
        )

    def instance_curve(self) -> RdpCurve:
        """One sparse-vector instance's RDP curve, at PMixED's orders 2..α."""
        from privlm.accounting import RdpCurve
        from privlm.accounting.analysis import sparse_vector

        orders = [float(k) for k in range(2, self.alpha + 1)]
        return RdpCurve.from_arrays(orders, sparse_vector.instance_rdp(self.split()[0], orders))

    def lifetime_curve(self, n_models: int) -> RdpCurve:
        """c instances and c paid queries: the most a deployment can ever release (any
        number of free tokens adds nothing)."""
        return (self.instance_curve() + self.query_cost(n_models)[1]).times(self.paid_tokens)


@dataclass(frozen=True, kw_only=True)
class SubMixConfig:
    """ε: the (α, ε) operational-privacy budget of every part; β: target leakage (Eq. 2)."""

    epsilon: float = setting(2.0, "SubMix: RDP ε of every part, at order α", gt=0, le=1000)
    alpha: float = setting(2.0, "SubMix: Rényi order α", gt=1, le=256)
    beta: float = setting(
        2.0 / 1024,
        "SubMix: target leakage β per query (here ε/T at the default ε and T = 1024; generate "
        "and deployments default to ε/T of their own ε and T)",
        gt=0,
    )
    delta: float = setting(1e-5, "δ (only for reporting conversions)", gt=0, lt=1)

    def __post_init__(self) -> None:
        check_settings(self)
        if not (self.epsilon > 0 and self.beta > 0 and self.alpha > 1):
            raise PrivlmError("SubMix needs ε > 0, β > 0 and α > 1")

    def lifetime_curve(self) -> RdpCurve:
        """The most a deployment can release about one unit: a unit lies in one part, whose
        ledger keeps its leakage within (α, ε)-RDP until STOP (Algorithm 2)."""
        from privlm.accounting import RdpCurve

        return RdpCurve.from_mapping({self.alpha: self.epsilon})


def part_ledgers(target: Any, name: str, n_parts: int, config: SubMixConfig) -> list[Any]:
    """SubMix's ledgers: one RDP ledger per part (per part, never per unit), in one
    database, chargeable together."""
    from privlm.accounting import Budget, PrivacyLedger, Relation

    budget = Budget(config.epsilon, config.delta, order=config.alpha)
    names = [f"{name}/part-{i:03d}" for i in range(n_parts)]
    return PrivacyLedger.family(target, names, budget, relation=Relation.PART)


@dataclass(frozen=True, kw_only=True)
class PlainConfig:
    """A predictor that charges nothing per token: ``public`` (the public model alone),
    ``adapter`` (one member: a DP-trained adapter, whose tokens are post-processing of a
    release already charged, or an ensemble member as a non-private baseline) or
    ``ensemble`` (the plain average of every member: not private, a utility baseline).
    ``statement`` carries what a DP adapter's ``privacy.json`` states, shown with its
    budget."""

    members: str = setting("public", "Which members answer", choices=PLAIN_MEMBERS)
    adapter: int = setting(0, "adapter: which member", ge=0)
    statement: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_settings(self)


PredictorConfig = PMixEDConfig | ScreenedPMixEDConfig | SubMixConfig | PlainConfig
MixtureConfig = PMixEDConfig | ScreenedPMixEDConfig | SubMixConfig
