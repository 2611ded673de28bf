"""Refuse, before any work starts, what will not fit in memory.

A model, an ensemble's stacked adapters and a KV cache are sized from their shapes alone
(the model from its config, instantiated on the ``meta`` device, which allocates nothing)
and compared with the memory free on the device they go to: ``torch.cuda.mem_get_info`` on
a GPU, the available physical memory on the CPU. Out-of-memory halfway through a generation
would waste work and, in the service, hold a deployment; a refusal up front names what does
not fit and what to change.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from privlm.errors import ModelLoadError

GIB = float(1 << 30)
HEADROOM = 0.9  # leave 10 % of the free memory for activations and the allocator


def free_bytes(device: torch.device) -> int:
    """Memory free on ``device`` now."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):  # not POSIX: do not refuse on a guess
        return 1 << 62


def require_fits(need: int, device: torch.device, what: str, advice: str) -> None:
    """Raise :class:`ModelLoadError` if ``need`` bytes exceed what ``device`` has free."""
    have = free_bytes(device)
    if need > HEADROOM * have:
        raise ModelLoadError(
            f"{what} needs about {need / GIB:.2f} GiB on {device}, which has "
            f"{have / GIB:.2f} GiB free; {advice}"
        )


def model_bytes(config: Any, dtype: torch.dtype) -> int:
    """The weights of a causal LM of ``config`` in ``dtype``, counted on the meta device."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return int(sum(p.numel() for p in model.parameters()) * itemsize)


def kv_cache_bytes(config: Any, dtype: torch.dtype, rows: int, tokens: int) -> int:
    """Keys and values for ``rows`` sequences of ``tokens`` tokens (every layer)."""
    layers = int(getattr(config, "num_hidden_layers", getattr(config, "n_layer", 0)))
    heads = int(getattr(config, "num_attention_heads", getattr(config, "n_head", 1)))
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(getattr(config, "hidden_size", getattr(config, "n_embd", 0)))
    head_dim = int(getattr(config, "head_dim", None) or hidden // max(heads, 1))
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * layers * kv_heads * head_dim * rows * tokens * itemsize
