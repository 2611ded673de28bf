"""Serving prompt adapters: many soft prompts batched over one frozen model.

``SoftPromptBank`` holds the embedding tables of several soft-prompt adapters; a batch may
mix rows for different prompts, and all of them run in one forward pass over the shared
base weights (each row's inputs are [its prompt; its text], left-padded). Prefix adapters are
served through PEFT, one adapter per call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from peft import PeftModel
from safetensors.torch import load_file

from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.models import LoadedModel, load_public_model
from privlm.models.placement import DeviceSpec, DtypeSpec
from privlm.prompting.prompt_dpsgd import class_logits, encode_examples
from privlm.prompting.tasks import Task, label_token_ids


def _adapter_config(path: Path) -> dict[str, Any]:
    cfg = path / "adapter_config.json"
    if not cfg.is_file():
        raise PrivlmError(f"{path} is not a saved prompt adapter (no adapter_config.json)")
    config: dict[str, Any] = json.loads(cfg.read_text())
    return config


class SoftPromptBank:
    """Soft prompts of one base model, served together."""

    def __init__(self, lm: LoadedModel, adapters: Sequence[str | Path]) -> None:
        self.lm = lm
        tables = []
        for a in adapters:
            path = Path(a)
            if _adapter_config(path).get("peft_type") != "PROMPT_TUNING":
                raise PrivlmError(f"{path} is not a soft-prompt (prompt tuning) adapter")
            weights = load_file(str(path / "adapter_model.safetensors"))
            tables.append(weights["prompt_embeddings"])
        if not tables:
            raise PrivlmError("a prompt bank needs at least one adapter")
        self.tables = tables

    @torch.no_grad()
    def next_token_logits(self, rows: Sequence[tuple[int, str]]) -> torch.Tensor:
        """(prompt index, text) per row → next-token logits, one forward pass."""
        tok, model = self.lm.tokenizer, self.lm.model
        emb = cast(torch.nn.Embedding, model.get_input_embeddings())
        dev, dtype = emb.weight.device, emb.weight.dtype
        seqs = []
        for idx, text in rows:
            ids = torch.tensor(
                tok(text, add_special_tokens=False)["input_ids"], dtype=torch.long, device=dev
            )
            seqs.append(torch.cat([self.tables[idx].to(dev, dtype), emb(ids)], 0))
        width = max(s.size(0) for s in seqs)
        x = torch.zeros(len(seqs), width, emb.weight.size(1), dtype=dtype, device=dev)
        mask = torch.zeros(len(seqs), width, dtype=torch.long, device=dev)
        for i, s in enumerate(seqs):
            x[i, width - s.size(0) :] = s
            mask[i, width - s.size(0) :] = 1
        positions = (mask.cumsum(1) - 1).clamp_min(0)
        out = model(inputs_embeds=x, attention_mask=mask, position_ids=positions).logits
        logits: torch.Tensor = out[:, -1].float().cpu()
        return logits


def prompt_adapter_accuracy(
    model_name: str,
    adapter: str | Path,
    task: Task,
    test: Sequence[Record],
    batch_size: int = 32,
    device: DeviceSpec = "auto",
    dtype: DtypeSpec = "auto",
) -> float:
    """Accuracy over the label tokens of a soft-prompt or prefix adapter."""
    lm = load_public_model(model_name, device=device, dtype=dtype)
    label_ids = label_token_ids(task, lm.tokenizer)
    kind = _adapter_config(Path(adapter)).get("peft_type")
    truth = np.array([task.class_of(r) for r in test])
    preds = []
    if kind == "PROMPT_TUNING":
        bank = SoftPromptBank(lm, [adapter])
        for s in range(0, len(test), batch_size):
            chunk = test[s : s + batch_size]
            logits = bank.next_token_logits([(0, task.template(r)) for r in chunk])
            preds.append(logits[:, label_ids].argmax(-1).numpy())
    else:
        model = PeftModel.from_pretrained(lm.model, adapter).eval()
        with torch.no_grad():
            for s in range(0, len(test), batch_size):
                ids, mask, last, _ = encode_examples(lm, task, list(test[s : s + batch_size]), 512)
                dev = lm.placement.device
                logits = class_logits(model, ids.to(dev), mask.to(dev), last, label_ids)
                preds.append(logits.argmax(-1).cpu().numpy())
    return float(np.mean(np.concatenate(preds) == truth))
