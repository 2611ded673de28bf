"""Local text perturbation with noisy word embeddings (the service's in-browser step,
paper 003 §3; Feyisetan et al. 2020).

Each word's GloVe vector is clipped to norm C, noised, and replaced by the nearest vocabulary
word. Two mechanisms: metric-DP multivariate Laplace and the Gaussian mechanism. The same
arithmetic runs in the browser (``privlm/service/static/perturb.js``); both are checked
against the shared test vectors in ``testvectors.json``.
"""

from privlm.perturb.mechanisms import (
    GaussianWordMechanism,
    LaplaceWordMechanism,
    WordMechanism,
    make_mechanism,
)
from privlm.perturb.text import PerturbedText, perturb_text, tokenize
from privlm.perturb.vocabulary import Vocabulary, load_glove

__all__ = [
    "GaussianWordMechanism",
    "LaplaceWordMechanism",
    "PerturbedText",
    "Vocabulary",
    "WordMechanism",
    "load_glove",
    "make_mechanism",
    "perturb_text",
    "tokenize",
]
