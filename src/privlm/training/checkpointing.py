"""Gradient checkpointing for big models, in the one form DP-SGD can use.

Checkpointing keeps only each decoder layer's input and recomputes the layer's activations
during the backward pass, trading compute for activation memory. Opacus computes
per-sample gradients from activations its forward hooks capture, so how a layer is
recomputed matters:

- **reentrant** checkpointing runs the first forward pass without autograd, so Opacus's
  hooks capture nothing there, and once in the recomputation: per-sample gradients (hooks
  mode) and per-sample norms (ghost mode) are exactly those of the plain model
  (``tests/training/test_checkpointing.py``). privlm uses this form.
- **non-reentrant** checkpointing breaks Opacus: its hooks mode silently leaves some
  per-sample gradients out (or fails with a ``KeyError``, depending on the wrapping), and its
  ghost mode refuses it ("Parameter tying is not supported"). privlm never enables it.

A model whose transformers class cannot checkpoint, and DP-SGD under ``torchrun`` (where
Opacus's DPDDP averages gradients from hooks that a recomputed forward would disturb), are
refused with that reason.
"""

from __future__ import annotations

from typing import Any

from privlm.errors import PrivlmError

# the form Opacus's capture hooks see once (module docstring)
CHECKPOINT_KWARGS = {"use_reentrant": True}


def enable_gradient_checkpointing(model: Any, distributed: bool = False) -> None:
    """Turn on reentrant checkpointing of every decoder layer of ``model`` (a transformers
    model or a PEFT model around one), or refuse with the reason."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise PrivlmError(
            f"{type(base).__name__} does not support gradient checkpointing in transformers; "
            "run without --gradient-checkpointing (or with a smaller --physical-batch-size)"
        )
    if distributed:
        raise PrivlmError(
            "gradient checkpointing is not supported for distributed DP-SGD (Opacus's DPDDP "
            "reduces gradients from hooks that the recomputed forward pass would run twice); "
            "run one process, or without --gradient-checkpointing"
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    # reentrant checkpointing needs a layer input that requires grad for the recomputation
    # to build a graph; the frozen embeddings' output is made to require it
    model.enable_input_require_grads()
    base.config.use_cache = False  # a KV cache is meaningless while training
