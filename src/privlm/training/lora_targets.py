"""Find the modules LoRA should adapt: every linear projection in the attention and MLP
blocks of a causal LM.

The reference implementation of the fine-tuning service matched target names that no layer
of the model had, so LoRA adapted nothing and "fine-tuning" trained no weight. Here the
targets are read off the model itself: the repeated decoder blocks are the largest
``nn.ModuleList``, and inside them every ``nn.Linear`` and every transformers ``Conv1D``
(GPT-2's projections) is a target. Embeddings and the LM head are never targets.
"""

from __future__ import annotations

from torch import nn
from transformers.pytorch_utils import Conv1D

from privlm.errors import PrivlmError

LINEAR_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, Conv1D)


def decoder_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The model's repeated decoder blocks: its largest ``nn.ModuleList``."""
    lists = [
        (n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) > 0
    ]
    if not lists:
        raise PrivlmError(
            f"{type(model).__name__}: no repeated decoder blocks (nn.ModuleList) found"
        )
    return max(lists, key=lambda nm: len(nm[1]))


def discover_lora_targets(model: nn.Module) -> list[str]:
    """Suffixes (as PEFT's ``target_modules`` takes them) of every linear projection inside
    the decoder blocks, e.g. ``['down_proj', 'gate_proj', 'k_proj', ...]`` for llama."""
    _, blocks = decoder_blocks(model)
    found = set()
    for block in blocks:
        for name, module in block.named_modules():
            if name and isinstance(module, LINEAR_TYPES):
                found.add(name.split(".")[-1])
    if not found:
        raise PrivlmError(
            f"{type(model).__name__}: no linear projections found in the decoder blocks"
        )
    return sorted(found)


def matched_modules(model: nn.Module, targets: list[str]) -> list[str]:
    """Full names of the modules that ``targets`` select (what PEFT will wrap)."""
    prefix, blocks = decoder_blocks(model)
    out = []
    for i, block in enumerate(blocks):
        for name, module in block.named_modules():
            if name and isinstance(module, LINEAR_TYPES) and name.split(".")[-1] in targets:
                out.append(f"{prefix}.{i}.{name}")
    return out


def check_targets(model: nn.Module, targets: list[str]) -> list[str]:
    """Validate user-given targets: each must match at least one projection."""
    names = matched_modules(model, targets)
    missing = [t for t in targets if not any(n.split(".")[-1] == t for n in names)]
    if missing:
        raise PrivlmError(
            f"LoRA target(s) {missing} match no linear layer in the decoder blocks of "
            f"{type(model).__name__}; available: {discover_lora_targets(model)}"
        )
    return names
