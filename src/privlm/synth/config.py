"""The settings of ``privlm synth``, one definition each (``privlm.config``): the CLI's help,
the Python API's keyword arguments and the service's ``synth`` job read them from here. No
torch is imported, so ``privlm synth --help`` and ``privlm plan`` stay fast."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from privlm.accounting.analysis import pmixed_bounds
from privlm.config import check_settings, setting
from privlm.errors import PrivlmError
from privlm.predict.config import PMixEDConfig, ScreenedPMixEDConfig, rdp_budget_for
from privlm.synth.scrub import check_scrub

if TYPE_CHECKING:
    from privlm.accounting import RdpCurve


def _orders() -> Any:
    """The RDP orders above 1 that DClip's and the count's curves are kept at. The analysis
    loads NumPy, so it is imported where a cost is computed, not by ``--help``."""
    import numpy as np

    from privlm.accounting.orders import DEFAULT_ORDERS

    return np.asarray([a for a in DEFAULT_ORDERS if a > 1.0])


def _zcdp_curve(rho: float) -> RdpCurve:
    """ρ-zCDP as an RDP curve at :func:`_orders` (Bun & Steinke 2016, Def. 1.1)."""
    from privlm.accounting import RdpCurve
    from privlm.accounting.analysis import bounded_range

    orders = _orders()
    return RdpCurve.from_arrays(orders, bounded_range.zcdp_rdp(rho, orders))


DEFAULT_DESCRIPTION = "Write one more text like the examples."
# the orders the plan may pick from (public, data-blind)
ALPHA_GRID = (2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32)
MECHANISMS = ("pmixed", "dclip", "screened")
GENERATORS = ("in-context", "dp-lora")


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """One synthetic dataset: ``count`` texts of at most ``max_tokens`` tokens, each from a
    disjoint batch of the data's privacy units, every token one release over the batch's
    ``members`` in-context members: PMixED's mollified mixture, or InvisibleInk's clipped
    exponential mechanism (DClip) (docs/sharp_edges.md, "DP synthetic text").

    ``texts_per_unit`` is not a setting: it is how many texts one unit's records can reach
    (one per declared label for a user), fixed by the data's unit kind and the declared
    labels, both public. Each text is calibrated to that share of the budget (its RDP budget
    at α, or DClip's ρ, divided by it), so that the texts one unit reaches compose to the
    requested (ε, δ) (:meth:`for_texts_per_unit`)."""

    epsilon: float = setting(
        8.0, "Synth: ε per privacy unit of the whole dataset, at δ", gt=0, le=1000
    )
    delta: float = setting(1e-5, "δ", gt=0, lt=1)
    # PMixED by measurement: higher MAUVE than DClip at ε = 8 and 3, at about the same cost
    # (docs/results.md, "DP synthetic text against InvisibleInk")
    mechanism: str = setting(
        "pmixed", "Per-token mechanism: pmixed (PMixED's mollified mixture, q = 1), dclip "
        "(InvisibleInk's clipped exponential mechanism over an expanded public top-k) or "
        "screened (a sparse-vector test sends tokens the public model predicts to it, free; "
        "paid_tokens per text are PMixED's)",
        choices=MECHANISMS,
    )  # fmt: skip
    generator: str = setting(
        "in-context", "How the texts are made: in-context (each text from a disjoint batch of "
        "units, every token a private-prediction release over in-context members; no "
        "training, for hundreds of records) or dp-lora (a LoRA adapter of the public model "
        "fine-tuned with DP-SGD on the records at the whole ε, conditioned on the declared "
        "labels; the texts are sampled from it, post-processing, any number of them)",
        choices=GENERATORS,
    )  # fmt: skip
    train_epochs: int = setting(3, "dp-lora: DP-SGD epochs over the units", ge=1, le=100)
    train_batch_size: int = setting(
        64, "dp-lora: expected (Poisson) batch of units per DP-SGD step (q = batch / units)",
        ge=1, le=65536,
    )  # fmt: skip
    learning_rate: float = setting(2e-3, "dp-lora: AdamW learning rate", gt=0, le=1)
    lora_rank: int = setting(8, "dp-lora: LoRA rank r", ge=1, le=256)
    count: int = setting(
        100, "Synthetic texts to write (public: it fixes the batches; the data's size does not)",
        ge=1, le=10**7,
    )  # fmt: skip
    auto_count: bool = setting(
        False, "Write as many texts as the data allows (count is then ignored): one per "
        "members units of each label, from a DP count of the units (Gaussian, charged with "
        "the run)",
    )  # fmt: skip
    count_share: float = setting(
        0.1, "auto_count: the share of ε (and half of δ) spent on the DP count", gt=0, lt=1
    )
    max_tokens: int = setting(64, "Most tokens in one synthetic text", ge=1, le=4096)
    members: int = setting(
        16, "In-context members mixed for each text: the batch's units are split among them "
        "by a keyed hash (more members: a larger radius, more compute per token)",
        ge=1, le=4096,
    )  # fmt: skip
    top_k: int = setting(
        100, "DClip: the public model's top k tokens, expanded to every token within 2C of "
        "the k-th (a public set: it costs nothing)", ge=1, le=1_000_000,
    )  # fmt: skip
    paid_tokens: int | None = setting(
        None, "screened: the paid (private) tokens of one text; once spent, the text goes on "
        "from the public model (default: a quarter of max_tokens, at least 1)", ge=1, le=4096,
    )  # fmt: skip
    threshold: float = setting(
        0.2, "screened: τ, the threshold of the noisy score TV(members' average, public) "
        "above which a token is paid", ge=0, le=10,
    )  # fmt: skip
    prompt_tokens: int = setting(
        128, "Tokens of a member's records kept as its prompt (every member's prompt is "
        "padded to this width, so no work depends on the records' lengths)", ge=1, le=32768,
    )  # fmt: skip
    alpha: int | None = setting(
        None, "Rényi order α of the per-token bound (default: the order in 2..32 (a grid) that gives "
        "the largest radius at this ε, δ, members and max tokens)", ge=2, le=256,
    )  # fmt: skip
    description: str = setting(
        DEFAULT_DESCRIPTION, "The public instruction before each text (declared public: it "
        "is released in the privacy statement)",
    )  # fmt: skip
    scrub: str = setting(
        "none", "Scrub PII from the records before any generator sees them: none, or a "
        "secret detector (pii, pii-fast, regex, …) whose spans become their type in "
        "brackets; a heuristic pre-step on each record that leaves ε unchanged",
    )  # fmt: skip
    stop_at_newline: bool = setting(
        True, "End a text at its first newline (a function of the released tokens only)"
    )
    seed: int | None = setting(
        None, "Seed the sampling and the batching key (reproducible runs; the guarantee "
        "assumes fresh randomness: tests and benchmarks only)",
    )  # fmt: skip

    texts_per_unit: int = field(default=1)

    def __post_init__(self) -> None:
        check_settings(self)
        check_scrub(self.scrub)
        if not (isinstance(self.texts_per_unit, int) and self.texts_per_unit >= 1):
            raise PrivlmError(
                f"texts_per_unit must be a whole number ≥ 1, got {self.texts_per_unit!r}"
            )
        if self.generator == "dp-lora" and self.auto_count:
            raise PrivlmError(
                "dp-lora samples any number of texts from its DP adapter, so it needs no count "
                "of the data: give --count N"
            )
        if self.alpha is not None:
            pmixed_bounds.check_alpha(self.alpha)
            if rdp_budget_for(self.epsilon, self.delta, self.alpha) <= 0:
                raise PrivlmError(
                    f"ε={self.epsilon} at δ={self.delta} leaves no RDP budget at order "
                    f"α={self.alpha}; raise ε or δ, or leave α to the plan"
                )
        if not any(rdp_budget_for(self.epsilon, self.delta, a) > 0 for a in ALPHA_GRID):
            raise PrivlmError(f"ε={self.epsilon} at δ={self.delta} is too small for any order α")

    def for_texts_per_unit(self, texts: int) -> SynthConfig:
        """This config with each text calibrated to ``1/texts`` of the budget: the plan of
        a run in which one unit's records reach ``texts`` texts."""
        return replace(self, texts_per_unit=texts)

    def text_epsilon(self, alpha: int) -> float:
        """The ε whose RDP budget at α (:func:`rdp_budget_for`, affine in ε with slope 1) is
        one text's share, 1/``texts_per_unit`` of Theorem C.3's budget for (ε, δ), so that
        the texts a unit reaches sum to it and convert to exactly (ε, δ); ε itself when a
        unit reaches one text. The per-text PMixED and screened configs are built at it, so
        the plan and the generator compute one radius."""
        if self.texts_per_unit == 1:
            return self.epsilon
        whole = rdp_budget_for(self.epsilon, self.delta, alpha)
        return self.epsilon - whole * (1.0 - 1.0 / self.texts_per_unit)

    def pmixed_config(self, alpha: int | None = None) -> PMixEDConfig:
        """pmixed: one text's PMixED (q = 1, ``max_tokens`` queries) at order ``alpha``
        (default: the plan's), at the text's share of the budget."""
        a = self.order if alpha is None else alpha
        return PMixEDConfig(
            epsilon=self.text_epsilon(a), delta=self.delta, alpha=a, queries=self.max_tokens,
            sample_rate=1.0,
        )  # fmt: skip

    @cached_property
    def order(self) -> int:
        """α: as given, or the one of ``ALPHA_GRID`` with the largest radius."""
        if self.alpha is not None:
            return self.alpha
        usable = [
            a for a in ALPHA_GRID
            if rdp_budget_for(self.epsilon, self.delta, a) > 0 and self.text_epsilon(a) > 0
        ]  # fmt: skip
        if not usable:
            raise PrivlmError(
                f"ε={self.epsilon} at δ={self.delta} over {self.texts_per_unit} texts per unit "
                "leaves no order α a budget; raise ε or lower δ"
            )
        return max(usable, key=lambda a: (self._radius_at(a), -a))

    def _radius_at(self, alpha: int) -> float:
        if self.mechanism == "screened":
            return self.screened_config(alpha).query_cost(self.members)[0]
        return self.pmixed_config(alpha).query_cost(self.members)[0]

    @property
    def paid(self) -> int:
        """screened: the paid tokens of one text (``paid_tokens`` or its default)."""
        if self.paid_tokens is not None:
            return min(self.paid_tokens, self.max_tokens)
        return max(1, self.max_tokens // 4)

    def screened_config(self, alpha: int | None = None) -> ScreenedPMixEDConfig:
        """screened: one text's Screened PMixED (q = 1; the public model once its paid
        tokens are spent), at order ``alpha`` (default: the plan's), at the text's share of
        the budget."""
        a = self.order if alpha is None else alpha
        return ScreenedPMixEDConfig(
            epsilon=self.text_epsilon(a), delta=self.delta, alpha=a, paid_tokens=self.paid,
            sample_rate=1.0, threshold=self.threshold, when_spent="public",
        )  # fmt: skip

    @cached_property
    def radius(self) -> float:
        """ρ*: the RD-ball radius that fits ``max_tokens`` queries in (ε, δ) at α."""
        return self._radius_at(self.order)

    @cached_property
    def clip(self) -> float:
        """DClip's C: the largest whose ``max_tokens`` tokens of each of the
        ``texts_per_unit`` texts fit (ε, δ) together."""
        from privlm.accounting.analysis import bounded_range

        rho = bounded_range.calibrate_rho(self.epsilon, self.delta, _orders())
        return bounded_range.dclip_clip_for(
            rho / (self.max_tokens * self.texts_per_unit), self.members
        )

    @cached_property
    def dclip_text_epsilon(self) -> float:
        """dclip: the ε one text may spend, its share of the run's budget (the cap of the
        text's own ledger): ε itself when a unit reaches one text."""
        from privlm.accounting.analysis import bounded_range

        return bounded_range.share_epsilon(self.epsilon, self.delta, self.texts_per_unit, _orders())

    @cached_property
    def token_curve(self) -> RdpCurve:
        """One token's RDP curve per unit (one member of ``members`` replaced): PMixED's
        replacement bound at q = 1, or DClip's ρ-zCDP."""
        if self.mechanism == "dclip":
            from privlm.accounting.analysis import bounded_range

            return _zcdp_curve(bounded_range.dclip_token_rho(self.clip, self.members))
        return self.pmixed_config().query_cost(self.members)[1]

    def parameters(self) -> dict[str, float | int]:
        """The mechanism's derived parameters, as the statement gives them."""
        if self.mechanism == "dclip":
            return {"clip": self.clip, "top_k": self.top_k}
        if self.mechanism == "screened":
            return {"alpha": self.order, "radius": self.radius, "paid_tokens": self.paid,
                    "threshold": self.threshold}  # fmt: skip
        return {"alpha": self.order, "radius": self.radius}

    def text_curve(self) -> RdpCurve:
        """What one text costs each unit of its batch: ``max_tokens`` tokens composed, or,
        screened, its paid tokens and their sparse-vector instances (free tokens cost
        nothing)."""
        if self.mechanism == "screened":
            return self.screened_config().lifetime_curve(self.members)
        return self.token_curve.times(self.max_tokens)


@dataclass(frozen=True)
class CountPlan:
    """``auto_count``'s DP count of the units (per label): the Gaussian mechanism at ρ, and
    the budget left to the texts (docs/sharp_edges.md, "DP synthetic text")."""

    rho: float
    sigma: float
    sensitivity: float
    generation: SynthConfig

    def curve(self) -> RdpCurve:
        return _zcdp_curve(self.rho)


def plan_count(config: SynthConfig, labels: int, users: bool) -> CountPlan:
    """Split (ε, δ): ``count_share``·ε and δ/2 for the count (ρ-zCDP, calibrated as DClip's),
    the rest of ε and δ/2 for the texts. One unit changes one label's count by one (a user:
    each of the labels its records carry, so the L2 sensitivity is √labels)."""
    from privlm.accounting.analysis import bounded_range

    half = config.delta / 2.0
    rho = bounded_range.calibrate_rho(config.epsilon * config.count_share, half, _orders())
    sensitivity = math.sqrt(labels) if users else 1.0
    sigma = sensitivity / math.sqrt(2.0 * rho)
    generation = replace(
        config, epsilon=config.epsilon * (1.0 - config.count_share), delta=half,
        auto_count=False,
    )  # fmt: skip
    return CountPlan(rho, sigma, sensitivity, generation)


def refuse_a_baseline_count(config: SynthConfig) -> None:
    """The no-reference baseline reads no record, so it cannot count them."""
    if config.auto_count:
        raise PrivlmError(
            "the baseline reads no record, so it cannot count them: give --count N (the "
            "number of texts the DP run wrote)"
        )
