"""In-context members (no training): each part's records become its member's prompt.

The ensemble is partitioned exactly as a LoRA ensemble (``privlm.data.partition``: a keyed
hash of each unit's identity, so one unit changes one part), and member i's prompt is the
first ``prompt_tokens`` tokens of part i's records, newline-joined in their order in the
data: a function of part i alone. The prompts are written to ``member-prompts.json``
beside the manifest; like LoRA adapters they are private, never released, and the manifest
is the same for neighbouring datasets. Served by :class:`privlm.predict.in_context.InContextEngine`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from privlm.data import Dataset
from privlm.fsutil import write_json_atomically
from privlm.models import LoadedModel, ModelSource, load_public_model
from privlm.training.manifest import PROMPTS

FORMAT = "privlm-in-context-prompts/1"


def member_prompt(tokenizer: Any, texts: list[str], limit: int) -> list[int]:
    """A part's prompt: its records newline-joined, the first ``limit`` tokens."""
    if not texts:
        return []  # an empty part: its member is the public model
    ids: list[int] = tokenizer("\n".join(texts) + "\n", add_special_tokens=False)["input_ids"]
    return ids[:limit]


def write_member_prompts(
    model: ModelSource, parts: list[tuple[str, Dataset]], limit: int, out: Path
) -> dict[str, dict[str, Any]]:
    """Write every member's prompt (engine order) to ``out/member-prompts.json``, readable
    by its owner only; returns each member's curator statistics (prompt length, whether it
    was cut, an empty part): exact counts of the private data, for the curator's report."""
    lm = model if isinstance(model, LoadedModel) else load_public_model(model, device="cpu")
    prompts, stats = [], {}
    for name, data in parts:
        full = member_prompt(lm.tokenizer, data.texts(), 10**9)
        prompts.append(full[:limit])
        stats[name] = {
            "prompt_tokens": min(len(full), limit), "cut": len(full) > limit,
            "empty_part": not data.records, "seconds": 0.0,
        }  # fmt: skip
    path = out / PROMPTS
    write_json_atomically(path, {"format": FORMAT, "prompts": prompts})
    os.chmod(path, 0o600)
    return stats
