"""The embedding vocabulary: GloVe 6B 50d, shipped inside privlm (``glove50d.npz``, the
20,000 most frequent words at float16; PDDL 1.0, see ``privlm.perturb.pack``), capped to
the most frequent words, each vector clipped to norm C (the mechanism's clipping bound)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from privlm.errors import DataError, PrivlmError
from privlm.perturb.mechanisms import DEFAULT_CLIP, clip_rows
from privlm.perturb.pack import PACKED, read_text_vectors

DEFAULT_VOCABULARY = 20_000


@dataclass(frozen=True)
class Vocabulary:
    """Words and their clipped vectors (float32, as served to the browser)."""

    words: tuple[str, ...]
    vectors: NDArray[np.float32]
    clip: float

    @cached_property
    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}

    @cached_property
    def _vectors64(self) -> NDArray[np.float64]:
        return self.vectors.astype(np.float64)

    @cached_property
    def _sq_norms(self) -> NDArray[np.float64]:
        v = self._vectors64
        out: NDArray[np.float64] = (v * v).sum(1)
        return out

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def embed(self, word: str) -> NDArray[np.float64]:
        """The clipped vector of ``word`` (lower-cased); the zero vector if it is unknown.

        An unknown word is still perturbed like any other: its output carries no
        information about it, and the zero vector lies inside the clipping ball, so the
        sensitivity bound 2C holds for it too."""
        i = self.index.get(word.lower())
        return np.zeros(self.dim) if i is None else self._vectors64[i]

    def nearest(self, points: NDArray[np.float64]) -> NDArray[np.int64]:
        """Index of the nearest word to each point: Σ(vᵢ − xᵢ)² in float64, first index on a
        tie, as the browser computes it. Candidates come from the expanded form, and the
        best few are re-ranked by the direct sum."""
        x = np.atleast_2d(np.asarray(points, dtype=np.float64))
        approx = self._sq_norms[None, :] - 2.0 * x @ self._vectors64.T
        k = min(8, len(self.words))
        cand = np.argpartition(approx, k - 1, axis=1)[:, :k]
        cand.sort(axis=1)  # ties go to the lowest index
        exact = ((self._vectors64[cand] - x[:, None, :]) ** 2).sum(-1)
        best: NDArray[np.int64] = cand[np.arange(len(x)), exact.argmin(1)].astype(np.int64)
        return best


def _read_packed(path: Path, limit: int) -> tuple[list[str], NDArray[np.float32]]:
    with np.load(path) as packed:
        words = packed["words"].tobytes().decode("utf-8").split("\n")[:limit]
        vectors = packed["vectors"][:limit].astype(np.float32)
    return words, vectors


def load_glove(
    limit: int = DEFAULT_VOCABULARY, clip: float = DEFAULT_CLIP, path: Path | None = None
) -> Vocabulary:
    """The ``limit`` most frequent GloVe 6B 50d words, vectors clipped to norm ``clip``:
    from the vocabulary shipped with privlm, or from ``path`` (a GloVe text file, .gz too,
    or an npz written by ``privlm.perturb.pack``)."""
    if limit < 2:
        raise PrivlmError("the vocabulary needs at least two words")
    source = path or PACKED
    if not source.is_file():
        raise DataError(source, "GloVe vectors not found")
    if source.suffix == ".npz":
        words, vectors = _read_packed(source, limit)
    else:
        words, vectors = read_text_vectors(source, limit)
    if limit > len(words) and path is None:
        raise PrivlmError(
            f"privlm ships {len(words):,} words; for a larger vocabulary pass a GloVe file"
        )
    return Vocabulary(tuple(words), clip_rows(vectors, clip).astype(np.float32), clip)
