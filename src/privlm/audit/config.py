"""The settings of privlm's audits, one definition each (``privlm.config``); no torch.

``ExtractionConfig`` is the random-code extraction attack of SubMix §4.2 (Ginart et al.
2022): m users with one secret ℓ-digit code each, a non-private fine-tune, PMixED (one user
per model) and SubMix (one user per half-part), g attack generations against each.
"""

from __future__ import annotations

from dataclasses import dataclass

from privlm.config import check_settings, setting
from privlm.errors import PrivlmError
from privlm.training.config import LoraTrainingConfig

EXTRACTION_DELTA = 1e-5  # PMixED's δ in the attack (the paper's)


@dataclass(frozen=True)
class ExtractionConfig:
    codes: int = setting(
        8, "m users, one secret code each (even: SubMix puts one user per half-part)", ge=2,
        le=10_000,
    )  # fmt: skip
    length: int = setting(4, "ℓ, digits per code", ge=1, le=12)
    generations: int = setting(100, "g, attack generations per model", ge=1, le=1_000_000)
    epsilon_pmixed: float = setting(
        8.0, "PMixED ε_G over all g generations, at δ = 1e-5", gt=0, le=1000
    )
    epsilon_submix: float = setting(2.0, "SubMix ε per part (RDP at α = 2)", gt=0, le=1000)
    sample_rate: float = setting(0.3, "PMixED q", gt=0, le=1)
    epochs: int = setting(60, "Fine-tuning epochs (enough to memorise)", ge=1, le=10_000)
    learning_rate: float = setting(3e-3, "Fine-tuning learning rate", gt=0, le=1)
    seed: int | None = setting(0, "Seed for the codes and the sampling (None: OS randomness)")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.codes % 2:
            raise PrivlmError(
                f"codes must be an even number (SubMix puts one user per half-part), got "
                f"{self.codes}"
            )

    def training(self, device: str = "auto", dtype: str = "auto") -> LoraTrainingConfig:
        """How each model is fine-tuned: rank 8, one record per sequence, until it memorises."""
        return LoraTrainingConfig(
            epochs=self.epochs, learning_rate=self.learning_rate, batch_size=4, block_size=32,
            pack=False, rank=8, device=device, dtype=dtype,
        )  # fmt: skip
