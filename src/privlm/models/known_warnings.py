"""Warnings the libraries privlm drives print because of how privlm calls them, and that
say nothing to privlm's user: silenced by their exact text, where privlm causes them.

- peft reads transformers' deprecated ``is_gradient_checkpointing`` every time it wraps a
  model (``PeftModel.__init__``): a ``FutureWarning`` about peft's code, once per adapter.

Two more arise in every DP-SGD run (:func:`privlm.training.dp_loop.dp_fit`, and
:func:`privlm.training.user_level.train_users_jointly` for user-level runs) and are
silenced only while it runs (:func:`quiet_during_dp_fit`):

- Opacus's "Secure RNG turned off" (a ``UserWarning`` from ``PrivacyEngine``): privlm never
  uses Opacus's secure mode; it passes its own generators, drawn from fresh OS entropy, or
  with ``--secure-mode`` its own CSPRNG noise (:mod:`privlm.training.secure_noise`), and
  every ``privacy.json`` states which (``randomness``).
- torch's "Full backward hook is firing when gradients are computed with respect to module
  outputs since no inputs require gradients": Opacus's per-sample hooks on the first
  trainable layer, whose input (the frozen model's activations) needs no gradient. The loop
  checks after the first backward pass that every trainable parameter holds its per-sample
  gradient, so the notice says nothing a run has not checked.

The other one a run used to print, peft's "Unable to fetch remote file …" on every adapter
saved, is not silenced but avoided: privlm saves adapters with ``save_embedding_layers=False``
(it never resizes a vocabulary), so peft does not look the base model up on the Hub
(:data:`SAVE_EMBEDDING_LAYERS`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# what every adapter save passes to ``save_pretrained`` as ``save_embedding_layers``
SAVE_EMBEDDING_LAYERS = False

KNOWN = ((FutureWarning, r"`is_gradient_checkpointing` is deprecated"),)
DURING_DP_FIT = (
    (UserWarning, r"Secure RNG turned off"),
    (UserWarning, r"Full backward hook is firing when gradients are computed with respect to "
                  r"module outputs since no inputs require gradients"),
)  # fmt: skip


def silence_known_warnings() -> None:
    """Install the filters for :data:`KNOWN` (idempotent: ``warnings`` drops duplicates)."""
    for category, message in KNOWN:
        warnings.filterwarnings("ignore", message=message, category=category)


@contextmanager
def quiet_during_dp_fit() -> Iterator[None]:
    """:data:`DURING_DP_FIT` silenced inside the block only; every other warning shows."""
    with warnings.catch_warnings():
        for category, message in DURING_DP_FIT:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def quiet_library_bars_off_terminal() -> None:
    """transformers' own bars ("Loading weights …" at every model load) carry nothing for
    a log: off a terminal they are turned off (privlm's own bars turn into plain lines,
    :mod:`privlm.progress`)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
