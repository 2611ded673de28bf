"""The settings of ``privlm synth``, one definition each (``privlm.config``): the CLI's help,
the Python API's keyword arguments and the service's ``synth`` job read them from here. No
torch is imported, so ``privlm synth --help`` and ``privlm plan`` stay fast."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from privlm.accounting import RdpCurve
from privlm.accounting.analysis import pmixed as analysis
from privlm.config import check_settings, setting
from privlm.errors import PrivlmError
from privlm.predict.config import rdp_budget_for

DEFAULT_DESCRIPTION = "Write one more text like the examples."
# the orders the plan may pick from (public, data-blind)
ALPHA_GRID = (2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32)


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """One synthetic dataset: ``count`` texts of at most ``max_tokens`` tokens, each from a
    disjoint batch of the data's privacy units, every token a PMixED release over the
    batch's ``members`` in-context members (docs/sharp_edges.md, "DP synthetic text")."""

    epsilon: float = setting(
        8.0, "Synth: ε per privacy unit of the whole dataset, at δ", gt=0, le=1000
    )
    delta: float = setting(1e-5, "δ", gt=0, lt=1)
    count: int = setting(
        100, "Synthetic texts to write (public: it fixes the batches; the data's size does not)",
        ge=1, le=10**7,
    )  # fmt: skip
    max_tokens: int = setting(64, "Most tokens in one synthetic text", ge=1, le=4096)
    members: int = setting(
        16, "In-context members mixed for each text: the batch's units are split among them "
        "by a keyed hash (more members: a larger radius, more compute per token)",
        ge=1, le=4096,
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
    stop_at_newline: bool = setting(
        True, "End a text at its first newline (a function of the released tokens only)"
    )
    seed: int | None = setting(
        None, "Seed the sampling and the batching key (reproducible runs; the guarantee "
        "assumes fresh randomness: tests and benchmarks only)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_settings(self)
        if self.alpha is not None:
            analysis.check_alpha(self.alpha)
            if rdp_budget_for(self.epsilon, self.delta, self.alpha) <= 0:
                raise PrivlmError(
                    f"ε={self.epsilon} at δ={self.delta} leaves no RDP budget at order "
                    f"α={self.alpha}; raise ε or δ, or leave α to the plan"
                )
        if not any(rdp_budget_for(self.epsilon, self.delta, a) > 0 for a in ALPHA_GRID):
            raise PrivlmError(f"ε={self.epsilon} at δ={self.delta} is too small for any order α")

    @cached_property
    def order(self) -> int:
        """α: as given, or the one of ``ALPHA_GRID`` with the largest radius."""
        if self.alpha is not None:
            return self.alpha
        usable = [a for a in ALPHA_GRID if rdp_budget_for(self.epsilon, self.delta, a) > 0]
        return max(usable, key=lambda a: (self._radius_at(a), -a))

    def _radius_at(self, alpha: int) -> float:
        per_query = rdp_budget_for(self.epsilon, self.delta, alpha) / self.max_tokens
        return analysis.solve_radius(per_query, alpha, self.members, 1.0)

    @cached_property
    def radius(self) -> float:
        """ρ*: the RD-ball radius that fits ``max_tokens`` queries in (ε, δ) at α."""
        return self._radius_at(self.order)

    @cached_property
    def token_curve(self) -> RdpCurve:
        """One token's RDP curve per unit (one member of ``members`` replaced, q = 1)."""
        curve = analysis.query_rdp_curve(self.radius, self.order, self.members, 1.0)
        return RdpCurve.from_mapping(curve)

    def text_curve(self) -> RdpCurve:
        """What one text costs each unit of its batch: ``max_tokens`` tokens composed."""
        return self.token_curve.times(self.max_tokens)
