"""Sampling policy for private prediction: ancestral sampling only.

PMixED's analysis (§5.1, observation 2) and SubMix's both assume the released token is a
sample from the private distribution itself. Greedy, top-k, top-p or a temperature change
which token is released as a function of the whole distribution, and leak more than charged.
"""

from __future__ import annotations

from typing import Any

import torch

from privlm.errors import PrivlmError
from privlm.randomness import PrivacyRandomness

FORBIDDEN = {
    "greedy": "greedy decoding releases the arg-max, a deterministic function of the private models",
    "do_sample": "decoding is always ancestral sampling",
    "temperature": "a temperature reshapes the private distribution after its cost was computed",
    "top_k": "top-k truncation releases information about the ranking of the private distribution",
    "top_p": "nucleus (top-p) truncation releases information about the private distribution's tail",
    "num_beams": "beam search is a deterministic search over the private distribution",
}


class UnsupportedSamplingError(PrivlmError):
    """A decoding strategy the privacy analysis does not cover."""


def check_ancestral(options: dict[str, Any]) -> None:
    """Refuse every decoding option but plain ancestral sampling, with the reason."""
    for key, value in options.items():
        if key not in FORBIDDEN:
            raise UnsupportedSamplingError(f"unknown sampling option {key!r}")
        neutral = (
            value in (None, False)
            or (key == "temperature" and value == 1.0)
            or (key == "do_sample" and value is True)
        )
        if not neutral:
            raise UnsupportedSamplingError(
                f"refused {key}={value!r}: {FORBIDDEN[key]}. Private prediction samples from the "
                "mixed distribution as is (ancestral sampling; PMixED §5.1)."
            )


def sample(log_probs: torch.Tensor, rng: PrivacyRandomness) -> int:
    """One token drawn from ``exp(log_probs)`` in float64 (the CSPRNG unless seeded)."""
    return rng.categorical(log_probs.detach().double().cpu().numpy())
