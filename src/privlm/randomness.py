"""Where every mechanism's noise and sampling come from.

Every DP analysis in privlm assumes the adversary does not know the mechanism's random
draws: DP-SGD's Gaussian noise and Poisson batches, PMixED's Poisson subsets and sampled
token, SubMix's sampled token, PromptPATE's noisy threshold and noisy votes. If the draws are
a function of something the adversary knows (a default seed of 0, say), the adversary can
recompute the run for both neighbouring datasets and tell them apart, and the stated ε
protects nothing.

So, by default, :class:`PrivacyRandomness` draws from the operating system's CSPRNG
(``os.urandom``), fresh for every run:

- **small draws** (a subset, a token, a noisy vote): the uniforms themselves come from the
  CSPRNG, 53 bits each; normals are their inverse CDF. Nothing is predictable from earlier
  draws.
- **bulk draws on a device** (DP-SGD's noise and batches): a torch generator whose *whole*
  state comes from the CSPRNG: all 19,937 bits of the CPU Mersenne Twister (a plain
  ``manual_seed`` keeps only 32 bits of its seed, which a brute-force search covers), and a
  64-bit Philox seed on CUDA. These generators are fast, not cryptographic: their output is
  never released directly, only through a trained model.

A seed exists only for reproducible experiments. With a seed, every draw is a fixed function
of it, and the guarantee does not hold against anyone who knows the seed:
:meth:`PrivacyRandomness.statement` says so in plain words (:data:`SEEDED_WARNING`), and
every privacy statement of a seeded run carries it.

>>> a, b = PrivacyRandomness(seed=7), PrivacyRandomness(seed=7)
>>> bool((a.uniform(4) == b.uniform(4)).all())
True
>>> PrivacyRandomness().statement()["randomness"]
'fresh OS entropy (CSPRNG); no seed'
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import torch

SEEDED_WARNING = (
    "seeded run: its noise and sampling are a fixed function of the seed, so the stated "
    "privacy guarantee does not hold against anyone who knows the seed; use it for "
    "reproducible experiments only, never for data that must be protected"
)
_MT_WORDS = 624  # mt19937 state words
_MT_STATE_OFFSET = 24  # torch's CPU generator state: seed(8) left(4) seeded(4) next(8) state…
_MT_LEFT_OFFSET = 8
_MT_STATE_BYTES = 5056


def csprng_uniforms(n: int) -> NDArray[np.float64]:
    """``n`` uniforms in the open interval (0, 1) from ``os.urandom``: 52 random bits each,
    centred in their cell, (w + ½)·2⁻⁵², every value exact in float64, the largest
    1 − 2⁻⁵³ and the smallest 2⁻⁵³. (With 53 bits the top cell's centre, 1 − 2⁻⁵⁴, rounded to
    exactly 1.0, and the normal drawn from it by the inverse CDF was +∞.)"""
    words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(12)
    return (words.astype(np.float64) + 0.5) * 2.0**-52


class PrivacyRandomness:
    """The random source of one mechanism run: the OS CSPRNG, or a seed (experiments only)."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is not None and (isinstance(seed, bool) or int(seed) != seed or seed < 0):
            raise ValueError(f"a seed must be a non-negative integer, got {seed!r}")
        self.seed = None if seed is None else int(seed)
        self._seeds = None if seed is None else np.random.SeedSequence(int(seed))
        self._rng = None if self._seeds is None else np.random.default_rng(self._seeds.spawn(1)[0])

    @property
    def seeded(self) -> bool:
        return self.seed is not None

    # -- small draws ----------------------------------------------------------------------------

    def uniform(self, size: int | tuple[int, ...] = ()) -> NDArray[np.float64]:
        """Uniforms in (0, 1) of the given shape."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        n = int(np.prod(shape)) if shape else 1
        if self._rng is not None:
            u = 1.0 - self._rng.random(n)  # (0, 1]
            u = np.where(u >= 1.0, 0.5, u)  # the seeded path never needs exactly 1
        else:
            u = csprng_uniforms(n)
        return u.reshape(shape)

    def normal(self, scale: float = 1.0, size: int | tuple[int, ...] = ()) -> NDArray[np.float64]:
        """N(0, scale²) draws, by the inverse CDF of :meth:`uniform`."""
        from scipy.special import ndtri

        return scale * np.asarray(ndtri(self.uniform(size)), dtype=np.float64)

    def laplace(self, scale: float, size: int | tuple[int, ...] = ()) -> NDArray[np.float64]:
        """Lap(0, scale) draws, by the inverse CDF of :meth:`uniform` (the sparse-vector
        test's noise; only its comparison with a score is ever released)."""
        u = self.uniform(size) - 0.5
        return np.asarray(-scale * np.sign(u) * np.log1p(-2.0 * np.abs(u)), dtype=np.float64)

    def bernoulli(self, n: int, p: float) -> NDArray[np.bool_]:
        """``n`` independent coin flips of probability ``p`` (Poisson subsampling)."""
        return self.uniform(n) < p

    def categorical(self, log_probs: NDArray[np.float64]) -> int:
        """One index drawn with probability ∝ exp(log_probs), by the inverse CDF (float64)."""
        lp = np.asarray(log_probs, dtype=np.float64)
        p = np.exp(lp - lp.max())
        cdf = np.cumsum(p)
        u = float(self.uniform()) * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))

    def integer(self) -> int:
        """A 63-bit integer, e.g. to seed a data-independent initialisation."""
        if self._seeds is not None:
            return int(self._seeds.spawn(1)[0].generate_state(1, np.uint64)[0] >> np.uint64(1))
        return secrets.randbits(63)

    # -- bulk draws -----------------------------------------------------------------------------

    def torch_generator(self, device: str | torch.device = "cpu") -> torch.Generator:
        """A fresh torch generator on ``device`` for bulk draws: a new independent stream at
        every call; its whole state from the CSPRNG unless a seed was given."""
        import torch

        dev = torch.device(device)
        gen = torch.Generator(device=dev)
        if self._seeds is not None:
            return gen.manual_seed(int(self._seeds.spawn(1)[0].generate_state(1, np.uint64)[0]))
        if dev.type != "cpu":
            return gen.manual_seed(secrets.randbits(64))
        state = gen.get_state().numpy().copy()
        if state.size != _MT_STATE_BYTES:  # another torch's layout: refuse rather than guess
            raise RuntimeError(
                f"unexpected torch CPU generator state ({state.size} bytes, expected "
                f"{_MT_STATE_BYTES}); privlm cannot give it a full-entropy state"
            )
        words = np.frombuffer(os.urandom(4 * _MT_WORDS), dtype=np.uint32).astype(np.uint64)
        state[_MT_STATE_OFFSET : _MT_STATE_OFFSET + 8 * _MT_WORDS] = words.view(np.uint8)
        state[_MT_LEFT_OFFSET : _MT_LEFT_OFFSET + 4] = np.array([1], np.int32).view(np.uint8)
        gen.set_state(torch.from_numpy(state))  # left = 1: the first draw re-twists the state
        return gen

    # -- what a statement says --------------------------------------------------------------------

    def statement(self) -> dict[str, Any]:
        """What privacy.json, a model card and ``--json`` output say about the randomness."""
        if self.seed is None:
            return {"randomness": "fresh OS entropy (CSPRNG); no seed", "seed": None}
        return {"randomness": "seeded", "seed": self.seed, "warning": SEEDED_WARNING}


def as_randomness(source: PrivacyRandomness | int | None) -> PrivacyRandomness:
    """A :class:`PrivacyRandomness` from one, a seed, or None (the OS CSPRNG)."""
    return source if isinstance(source, PrivacyRandomness) else PrivacyRandomness(source)
