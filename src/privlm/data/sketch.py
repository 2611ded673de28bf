"""Near-copy detection: MinHash sketches of canonical texts, banded for LSH (datasketch).

A copy of a record with one character changed, a prefix added, or split in two or merged
with another, is not byte-equal to it, yet releases almost the same thing. The record index
(privlm.service.record_index) finds such copies with a MinHash sketch of each text's
character 5-grams (Broder 1997, "On the resemblance and containment of documents"), made by
``datasketch.MinHash``, and its locality-sensitive bands (the (b, r) that
``datasketch.MinHashLSH`` chooses for Jaccard threshold 0.3: 21 bands of 3 of 64 hashes).

Two texts whose sketches share a band are *candidates*; a candidate is a near copy when the
estimated share of the smaller text's 5-grams that the larger holds (its containment,
from the estimated Jaccard similarity J and the two sizes: |A∩B| = J(|A|+|B|)/(1+J)) is at
least :data:`NEAR_CONTAINMENT`. Texts shorter than :data:`MIN_SKETCH_CHARS` canonical
characters get no sketch: only exact (canonical) copies of them are recognised.

The permutations are drawn from a seed derived from the tenant's record key and every band
is stored as a keyed digest, so a leaked database does not let anyone test guessed texts.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import numpy as np
from datasketch import MinHash, MinHashLSH

SHINGLE_CHARS = 5
NUM_PERM = 64
LSH_THRESHOLD = 0.3  # candidates: found with probability 0.94 at Jaccard 0.5, 0.994 at 0.6
NEAR_CONTAINMENT = 0.7  # a candidate is a near copy at this estimated containment
MIN_SKETCH_CHARS = 24


@dataclass(frozen=True)
class Sketch:
    """A text's MinHash signature and how many distinct 5-grams it has."""

    signature: np.ndarray
    size: int

    def to_bytes(self) -> bytes:
        return self.signature.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, blob: bytes, size: int) -> Sketch:
        return cls(np.frombuffer(blob, dtype="<u8").copy(), size)


def shingles(text: str) -> set[bytes]:
    """The distinct character 5-grams of ``text`` (a canonical text)."""
    data = text.encode("utf-8")
    if len(data) <= SHINGLE_CHARS:
        return {data}
    return {data[i : i + SHINGLE_CHARS] for i in range(len(data) - SHINGLE_CHARS + 1)}


def containment(a: Sketch, b: Sketch) -> float:
    """The estimated share of the smaller text's 5-grams that the other holds."""
    jaccard = float(np.mean(a.signature == b.signature))
    common = jaccard * (a.size + b.size) / (1.0 + jaccard)
    return min(1.0, common / max(1, min(a.size, b.size)))


class Sketcher:
    """Sketches and bands under one key (one tenant's): the same text gives the same bands."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        seed = int.from_bytes(hmac.new(key, b"privlm minhash seed", hashlib.sha256).digest()[:4])
        base = MinHash(num_perm=NUM_PERM, seed=seed)
        self._seed, self._perm, self._scheme = seed, base.permutations, base.scheme
        lsh = MinHashLSH(threshold=LSH_THRESHOLD, num_perm=NUM_PERM)
        self.bands, self.rows = lsh.b, lsh.r

    def sketch(self, canonical: str) -> Sketch | None:
        """The sketch of a canonical text; None when it is too short to have one."""
        if len(canonical) < MIN_SKETCH_CHARS:
            return None
        grams = shingles(canonical)
        m = MinHash(
            num_perm=NUM_PERM, seed=self._seed, permutations=self._perm, scheme=self._scheme
        )
        m.update_batch(list(grams))
        return Sketch(np.asarray(m.hashvalues, dtype=np.uint64), len(grams))

    def band_keys(self, sketch: Sketch) -> list[str]:
        """One keyed digest per LSH band (16 hex characters each)."""
        sig = sketch.signature.astype("<u8")
        return [
            hmac.new(
                self.key, b"band%d:" % i + sig[i * self.rows : (i + 1) * self.rows].tobytes(),
                hashlib.sha256,
            ).hexdigest()[:16]
            for i in range(self.bands)
        ]  # fmt: skip
