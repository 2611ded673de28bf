"""The settings of private prompt learning, one definition each (``privlm.config``):
PromptDPSGD and PromptPATE (Duan et al. 2023, "Flocks of Stochastic Parrots"). They import no
torch, so ``privlm prompt … --help`` and the service's request models read them without
loading a model library.
"""

from __future__ import annotations

from dataclasses import dataclass

from privlm.config import SEED_HELP, check_settings, setting, with_default
from privlm.errors import PrivlmError
from privlm.training.config import DpSgdPrivacy

ACCOUNTING = ("data-independent", "data-dependent")
DATA_DEPENDENT_REFUSAL = (
    "refused: data-dependent accounting is not charged to a budgeted ledger. Its figure is a "
    "noisy estimate (PATE 2018's smooth-sensitivity release), below the true cost about half "
    "the time, and a ledger figure must be an upper bound; an upper confidence bound would "
    "have to add the data-independent ceiling times the noise quantile, more than the "
    "data-independent charge itself (docs/sharp_edges.md). Use data-independent accounting "
    "(the default): each query is charged its worst case before its label leaves."
)
PROMPT_KINDS = ("soft-prompt", "prefix")
UNITS = ("auto", "record", "user")
TEACHER_VOTES = ("top1", "labels")


@dataclass(kw_only=True)
class PromptDpSgdConfig(DpSgdPrivacy):
    """PromptDPSGD (Flocks §3): DP-SGD's privacy settings, shared with LoRA's DP-SGD
    (:class:`~privlm.training.config.DpSgdPrivacy`), at the prompt's own defaults, and the
    prompt's settings."""

    target_epsilon: float = with_default(DpSgdPrivacy, "target_epsilon", 8.0)
    batch_size: int = with_default(DpSgdPrivacy, "batch_size", 32)
    physical_batch_size: int = with_default(DpSgdPrivacy, "physical_batch_size", 16)
    epochs: int = with_default(DpSgdPrivacy, "epochs", 2)
    learning_rate: float = setting(1e-2, "AdamW learning rate", gt=0, le=10)
    kind: str = setting("soft-prompt", "The prompt", choices=PROMPT_KINDS)
    virtual_tokens: int = setting(10, "Soft prompt / prefix length", ge=1, le=1024)
    max_length: int = 96
    unit: str = setting(
        "auto",
        "What the guarantee protects where users have several records: record, user (each "
        "user's first record), or auto (refuses to guess when users repeat)",
        choices=UNITS,
    )

    @property
    def private(self) -> bool:
        """False for the non-private baseline (``noise="none"``)."""
        return self.noise != "none"


@dataclass(kw_only=True)
class PromptPateConfig:
    teachers: int = setting(100, "Teachers (one-shot prompts of private examples)", ge=2, le=100000)
    shots: int = setting(1, "Private examples per teacher", ge=1, le=64)
    threshold: float = setting(60.0, "Confident-GNMax threshold T", ge=0)
    sigma_threshold: float = setting(30.0, "σ1 of the threshold check", gt=0)
    sigma: float = setting(10.0, "σ2 of GNMax", gt=0)
    epsilon: float = setting(8.0, "Budget ε of a new ledger", gt=0, le=1000)
    delta: float | None = setting(
        None, "δ (default min(1/N^1.1, 1e-6), N private examples)", gt=0, lt=1
    )
    queries: int | None = setting(
        None,
        "Public inputs to label, fixed before any vote is seen (default: all given)",
        ge=1,
        le=10**7,
    )
    accounting: str = setting(
        "data-independent",
        "data-independent: each query charged its worst case (a budget that fits fewer queries "
        "than asked is refused, with the number it fits) "
        "(data-dependent, PATE 2018's noisy estimate of the per-vote cost, is refused: a "
        "ledger figure must be an upper bound)",
        choices=ACCOUNTING,
    )
    student_candidates: int = setting(20, "Candidate student prompts", ge=1, le=10000)
    # at least one: the student is picked on held-back inputs (0 was refused after the charge)
    holdout: int = setting(100, "Labelled public inputs held back to pick the student", ge=1)
    # None: the noisy threshold and votes come from the OS CSPRNG; a seed voids the guarantee
    seed: int | None = setting(None, SEED_HELP)
    partition_key: str | None = setting(
        None,
        "Hex key of the keyed-hash teacher assignment (default: a fresh one); recorded in "
        "privacy.json",
    )
    batch_size: int = setting(
        64, "Prompts per forward pass (all teachers' prompts are pooled)", ge=1, le=4096
    )
    # "top1": black-box teachers, a vote is the model's top-1 next token (OTHER never votes);
    # "labels": each teacher votes the argmax of its calibrated label-token probabilities.
    # Either way a teacher casts one vote, so the accounting is the same.
    teacher_votes: str = setting(
        "top1",
        "top1: black-box teachers vote their top-1 next token; labels: the argmax of the "
        "calibrated label-token probabilities (one vote per teacher either way)",
        choices=TEACHER_VOTES,
    )

    def __post_init__(self) -> None:
        check_settings(self)  # the declared bounds and choices first, naming the setting
        if self.accounting == "data-dependent":  # before any vote is computed or charged
            raise PrivlmError(DATA_DEPENDENT_REFUSAL)
