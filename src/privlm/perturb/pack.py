"""Build the perturbation vocabulary that ships inside privlm (``glove50d.npz``).

The upload page and ``privlm perturb`` need GloVe 6B 50d vectors (Pennington et al. 2014),
released under the Open Data Commons Public Domain Dedication and License (PDDL 1.0), which
allows redistribution. privlm ships the 20,000 most frequent words (its default vocabulary)
at float16 (1.9 MB), so an installed privlm perturbs text with no data directory. Rebuild it
from the GloVe text file (``glove.6B.50d.txt``, optionally gzipped, most frequent words first) with

    python -m privlm.perturb.pack GLOVE_FILE [--words 50000]
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

PACKED = Path(__file__).with_name("glove50d.npz")
PACKED_WORDS = 20_000  # the default vocabulary; keeps the file under 2 MB


def read_text_vectors(path: Path, limit: int) -> tuple[list[str], np.ndarray]:
    """The first ``limit`` rows of a GloVe text file (``word v1 … v50`` per line)."""
    opener = gzip.open if path.suffix == ".gz" else open
    words: list[str] = []
    rows: list[np.ndarray] = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if len(words) >= limit:
                break
            parts = line.rstrip("\n").split(" ")
            words.append(parts[0])
            rows.append(np.array(parts[1:], dtype=np.float32))
    return words, np.stack(rows)


def pack(source: Path, out: Path = PACKED, limit: int = PACKED_WORDS) -> Path:
    """Write ``limit`` words and their float16 vectors to ``out`` (a compressed npz)."""
    words, vectors = read_text_vectors(source, limit)
    if any("\n" in w for w in words):
        raise ValueError("a word contains a newline")
    np.savez_compressed(
        out,
        words=np.frombuffer("\n".join(words).encode("utf-8"), dtype=np.uint8),
        vectors=vectors.astype(np.float16),
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", type=Path, help="glove.6B.50d.txt (or .txt.gz)")
    ap.add_argument("--words", type=int, default=PACKED_WORDS)
    args = ap.parse_args()
    out = pack(args.source, limit=args.words)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
