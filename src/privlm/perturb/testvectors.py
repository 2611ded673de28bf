"""Test vectors shared by the Python and JavaScript implementations of the perturbation.

``testvectors.json`` holds inputs (mechanism parameters, texts, the raw 32-bit random words)
and the outputs Python computed from them, on the ``VOCABULARY`` most frequent GloVe words.
The Python tests recompute the outputs and compare; the JavaScript test runs perturb.js in
Node on the same inputs and compares. Regenerate with ``python -m privlm.perturb.testvectors``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from privlm.perturb.gaussian_calibration import gaussian_epsilon, gaussian_sigma
from privlm.perturb.mechanisms import make_mechanism
from privlm.perturb.text import perturb_text, split_lines, tokenize
from privlm.perturb.uniforms import uniforms_from_words
from privlm.perturb.vocabulary import Vocabulary, load_glove

PATH = Path(__file__).with_name("testvectors.json")
VOCABULARY = 2000
CLIP = 5.0

TEXTS = [
    "My name is John Smith and I live in Boston.",
    "Call me at 555-1234, or e-mail john@example.com!\nSecond line: the patient's MRN is 88213.",
    "Unknown words like Zyxwvut and naïve café stay perturbed too.",
]
MECHANISMS: list[dict[str, Any]] = [
    {"name": "laplace", "epsilon": 10.0},
    {"name": "laplace", "epsilon": 40.0},
    {"name": "gaussian", "epsilon": 5.0, "delta": 1e-5},
    {"name": "gaussian", "epsilon": 30.0, "delta": 1e-6},
]
CALIBRATION = [
    (0.1, 1e-5, 1.0), (1.0, 1e-5, 1.0), (3.0, 1e-6, 10.0), (10.0, 1e-5, 10.0),
    (50.0, 1e-8, 10.0), (200.0, 1e-5, 10.0),
]  # fmt: skip


def compute(vocab: Vocabulary, spec: dict[str, Any]) -> dict[str, Any]:
    """The outputs for the inputs in ``spec`` (``compute(vocab, spec)`` == ``spec`` once
    generated)."""
    out: dict[str, Any] = {"vocabulary": VOCABULARY, "clip": CLIP, "cases": [], "calibration": []}
    for case in spec["cases"]:
        m = case["mechanism"]
        mech = make_mechanism(m["name"], m["epsilon"], m.get("delta"), CLIP)
        words = np.array(case["random_words"], dtype=np.uint32)
        used = 0

        def uniforms(n: int, words: np.ndarray = words) -> np.ndarray:
            nonlocal used
            if used + n > len(words):
                raise ValueError("test vector has too few random words")
            u = uniforms_from_words(words[used : used + n])
            used += n
            return u

        res = perturb_text(case["text"], vocab, mech, uniforms)
        out["cases"].append(
            {
                "mechanism": m,
                "text": case["text"],
                "tokens": [tokenize(line) for line in split_lines(case["text"])],
                "random_words": case["random_words"],
                "perturbed": res.text,
                **res.to_dict(),
            }
        )
    for item in spec["calibration"]:
        eps, delta, sens = (
            (item["epsilon"], item["delta"], item["sensitivity"])
            if isinstance(item, dict)
            else item
        )
        sigma = gaussian_sigma(eps, delta, sens)
        out["calibration"].append(
            {
                "epsilon": eps, "delta": delta, "sensitivity": sens, "sigma": sigma,
                "epsilon_back": gaussian_epsilon(sigma, sens, delta),
                "epsilon_of_4": gaussian_epsilon(sigma, 2.0 * sens, delta),
            }
        )  # fmt: skip
    return out


def inputs(seed: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    cases = []
    for m in MECHANISMS:
        for text in TEXTS:
            n = sum(len(tokenize(line)) for line in split_lines(text))
            k = make_mechanism(m["name"], m["epsilon"], m.get("delta"), CLIP).uniforms_per_word(50)
            cases.append(
                {
                    "mechanism": m,
                    "text": text,
                    "random_words": rng.integers(0, 2**32, n * k, dtype=np.uint32).tolist(),
                }
            )
    return {"cases": cases, "calibration": CALIBRATION}


def main() -> None:
    vocab = load_glove(VOCABULARY, CLIP)
    PATH.write_text(json.dumps(compute(vocab, inputs()), ensure_ascii=False) + "\n")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
