"""Warnings the libraries privlm drives print because of how privlm calls them, and that
say nothing to privlm's user: silenced by their exact text, where privlm causes them.

- peft reads transformers' deprecated ``is_gradient_checkpointing`` every time it wraps a
  model (``PeftModel.__init__``): a ``FutureWarning`` about peft's code, once per adapter.

The other one a run used to print, peft's "Unable to fetch remote file …" on every adapter
saved, is not silenced but avoided: privlm saves adapters with ``save_embedding_layers=False``
(it never resizes a vocabulary), so peft does not look the base model up on the Hub
(:data:`SAVE_EMBEDDING_LAYERS`).
"""

from __future__ import annotations

import sys
import warnings

# what every adapter save passes to ``save_pretrained`` as ``save_embedding_layers``
SAVE_EMBEDDING_LAYERS = False

KNOWN = ((FutureWarning, r"`is_gradient_checkpointing` is deprecated"),)


def silence_known_warnings() -> None:
    """Install the filters for :data:`KNOWN` (idempotent: ``warnings`` drops duplicates)."""
    for category, message in KNOWN:
        warnings.filterwarnings("ignore", message=message, category=category)


def quiet_library_bars_off_terminal() -> None:
    """transformers' own bars ("Loading weights …" at every model load) carry nothing for
    a log: off a terminal they are turned off (privlm's own bars turn into plain lines,
    :mod:`privlm.progress`)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
