"""Non-private LoRA fine-tuning of the public model on one part of the private corpus.

Defaults follow Table 2 of the PMixED paper (rank 4, LoRA α 32, AdamW with learning rate
2e-4, weight decay 0.01, a linear schedule), scaled to a 2-core CPU: 3 epochs instead of 15
and blocks of 256 tokens instead of 512.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, cast

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedTokenizerBase, get_linear_schedule_with_warmup

from privlm.detect import Span
from privlm.errors import PrivlmError
from privlm.fsutil import write_directory_atomically
from privlm.models import LoadedModel, ModelSource, working_copy
from privlm.models.known_warnings import SAVE_EMBEDDING_LAYERS
from privlm.models.placement import DeviceSpec, DtypeSpec
from privlm.progress import progress_bar
from privlm.training.checkpointing import enable_gradient_checkpointing
from privlm.training.config import LoraTrainingConfig as LoraTrainingConfig
from privlm.training.lora_targets import check_targets, discover_lora_targets
from privlm.training.redaction import (
    IGNORE,
    embed_with_masks,
    mask_embedding,
    masked_lm_loss,
    redacted_blocks,
    redacted_sequences,
)


def token_blocks(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], block_size: int
) -> torch.Tensor:
    """Texts joined by the EOS token and cut into blocks; a part shorter than one block
    becomes one shorter block, so no part is left without training data."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer(t, add_special_tokens=False)["input_ids"])
        ids.append(eos)
    if len(ids) < 2:
        raise PrivlmError("a part has no tokens to train on")
    n = len(ids) // block_size
    if n == 0:
        return torch.tensor([ids], dtype=torch.long)
    return torch.tensor(ids[: n * block_size], dtype=torch.long).view(n, block_size)


def record_sequences(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each text its own sequence (+EOS, cut at ``block_size``), right-padded; returns the
    ids and the labels, which ignore (-100) the padding: redacted sequences with nothing
    redacted."""
    enc = redacted_sequences(tokenizer, texts, [[] for _ in texts], block_size)
    return enc.ids, enc.labels


def lora_model(
    source: ModelSource,
    rank: int,
    alpha: float,
    targets: list[str] | None,
    seed: int,
    init_adapter: str | Path | None = None,
    device: DeviceSpec = "cpu",
    dtype: DtypeSpec = "float32",
) -> tuple[LoadedModel, PeftModel, list[str]]:
    """The public model (``source``: a name, or a loaded model, which is copied) wrapped with a
    fresh LoRA adapter (seeded initialisation) on the given targets, or on every projection
    discovered in the decoder blocks. With ``init_adapter``, training continues from that
    saved adapter instead (JFT's phase 2 starts from phase 1)."""
    lm = working_copy(source, device, dtype)  # LoRA weights stay float32 (PEFT)
    if init_adapter is not None:
        path = Path(init_adapter)
        if not (path / "adapter_config.json").is_file():
            raise PrivlmError(f"{path} is not a saved LoRA adapter (no adapter_config.json)")
        model = PeftModel.from_pretrained(lm.model, path, is_trainable=True)
        found = sorted(cast(LoraConfig, model.peft_config["default"]).target_modules or [])
        return lm, model, found
    targets = targets or discover_lora_targets(lm.model)
    check_targets(lm.model, targets)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int; a float scales too
            target_modules=targets,
            lora_dropout=0.0,
            bias="none",
        )
        model = get_peft_model(lm.model, config)
    return lm, model, targets


def save_untrained_adapter(
    source: ModelSource, config: LoraTrainingConfig, out_dir: Path
) -> dict[str, Any]:
    """The adapter of an empty part: LoRA's B starts at zero, so it equals the public model."""
    t0 = time.perf_counter()
    _, model, targets = lora_model(
        source, config.rank, config.alpha, config.targets, config.seed,
        device=config.device, dtype=config.dtype,
    )  # fmt: skip
    write_directory_atomically(
        out_dir,
        lambda d: model.save_pretrained(str(d), save_embedding_layers=SAVE_EMBEDDING_LAYERS),
    )
    return {
        "blocks": 0, "tokens": 0, "steps": 0, "final_loss": None,
        "seconds": time.perf_counter() - t0, "targets": targets,
        "empty_part": "no unit fell in this part: the member is the public model",
    }  # fmt: skip


def training_token_usage(
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    labels: torch.Tensor,
    masked: torch.Tensor | None,
    config: LoraTrainingConfig,
    redact: list[list[Span]] | None,
) -> dict[str, Any]:
    """How many of the texts' tokens (each text's tokens and its EOS) are trained on: the
    labelled positions of the blocks kept, redaction slots counted as used."""
    total = sum(len(ids) + 1 for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    used = int((labels != IGNORE).sum()) + (0 if masked is None else int(masked.sum()))
    used = min(used, total)
    rules = [
        "the last partial block" if config.pack else f"cutting texts at {config.block_size} tokens"
    ]
    if config.max_blocks is not None:
        rules.append(f"the cap of {config.max_blocks} blocks")
    if redact is not None:
        rules.append("redaction (a span becomes one slot)")
    summary = f"trains on {used:,} of {total:,} tokens ({used / max(total, 1):.1%})"
    if used < total:
        summary += f"; {total - used:,} dropped by {' and '.join(rules)}"
    return {"tokens": total, "used": used, "dropped": total - used,
            "used_fraction": used / max(total, 1), "summary": summary}  # fmt: skip


def finetune_lora(
    source: ModelSource,
    texts: list[str],
    config: LoraTrainingConfig,
    out_dir: Path,
    desc: str = "lora",
    progress: bool = True,
    redact: list[list[Span]] | None = None,
) -> dict[str, Any]:
    """Train one LoRA adapter on ``texts`` and save it (PEFT format) to ``out_dir``.

    With ``redact`` (one span list per text), each span is one ``<mask>`` slot, left out of
    the loss and its normalisation (JFT A.2, ``privlm.training.redaction``)."""
    t0 = time.perf_counter()
    lm, model, targets = lora_model(
        source, config.rank, config.alpha, config.targets, config.seed,
        device=config.device, dtype=config.dtype,
    )  # fmt: skip
    device = lm.placement.device
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    masked_all: torch.Tensor | None = None
    if redact is not None:
        encode = redacted_blocks if config.pack else redacted_sequences
        enc = encode(lm.tokenizer, texts, redact, config.block_size)
        blocks, labels_all, masked_all = enc.ids, enc.labels, enc.masked
    elif config.pack:
        blocks = token_blocks(lm.tokenizer, texts, config.block_size)
        labels_all = blocks
    else:
        blocks, labels_all = record_sequences(lm.tokenizer, texts, config.block_size)
    if config.max_blocks is not None:
        blocks, labels_all = blocks[: config.max_blocks], labels_all[: config.max_blocks]
        if masked_all is not None:
            masked_all = masked_all[: config.max_blocks]
    usage = training_token_usage(lm.tokenizer, texts, labels_all, masked_all, config, redact)
    mask_vector = mask_embedding(lm.model, lm.tokenizer) if masked_all is not None else None
    gen = torch.Generator().manual_seed(config.seed)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(blocks) / config.batch_size)
    total = steps_per_epoch * config.epochs
    sched = get_linear_schedule_with_warmup(opt, 0, total)
    bar = progress_bar(total=total, desc=desc, unit="step", disable=not progress, leave=False)
    last_loss = float("nan")
    for _ in range(config.epochs):
        order = torch.randperm(len(blocks), generator=gen)
        for start in range(0, len(blocks), config.batch_size):
            pick = order[start : start + config.batch_size]
            batch, labels = blocks[pick].to(device), labels_all[pick].to(device)
            masks = None if masked_all is None else masked_all[pick].to(device)
            attention = None
            if not config.pack:  # right padding: attend to real tokens and mask slots
                real = labels != IGNORE
                if masks is not None:
                    real |= masks
                attention = real.long()
            if masks is None:
                logits = model(input_ids=batch, attention_mask=attention).logits
            else:
                assert mask_vector is not None
                embeds = embed_with_masks(model, batch, masks, mask_vector)
                logits = model(inputs_embeds=embeds, attention_mask=attention).logits
            loss = masked_lm_loss(logits, labels, per_example=False)
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            last_loss = float(loss.detach())
            bar.update(1)
            bar.set_postfix(loss=f"{last_loss:.3f}")
    bar.close()
    write_directory_atomically(
        out_dir,
        lambda d: model.save_pretrained(str(d), save_embedding_layers=SAVE_EMBEDDING_LAYERS),
    )
    return {
        "blocks": len(blocks),
        "tokens": int(blocks.numel()),
        "token_usage": usage,
        "steps": total,
        "final_loss": last_loss,
        "seconds": time.perf_counter() - t0,
        "targets": targets,
        **lm.placement.describe(),
    }
