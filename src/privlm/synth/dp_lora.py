"""``privlm synth --generator dp-lora``: DP synthetic texts sampled from a LoRA adapter of the
public model fine-tuned with DP-SGD on the records (plan → check → fit → charge → sample).

With enough records a DP fine-tuned generator writes texts closer to the data than private
prediction can (Yue et al. 2023; Kurakin et al. 2024; NeMo Safe Synthesizer): DP-SGD spends
the whole ε once, on the adapter, and every text is then post-processing of it, so the
number of texts is free. With few records DP-SGD has too few steps and in-context members
win (docs/sharp_edges.md, "DP synthetic text").

1. **Plan and check.** Each record becomes one training text, its public context (the
   description, its label, ``Text:``) before it, so the adapter learns each label's texts
   and is sampled per label. The training data keeps the records of the declared labels
   (a public rule) and their units. DP-SGD's run is planned as ``privlm train dpsgd`` plans
   it (:class:`privlm.training.dpsgd.DpSgdRun`: σ calibrated to the whole (ε, δ)), and its
   charge is checked against the dataset's ledger before the model is copied.
2. **Fit, then charge.** The adapter is trained as planned; its charge, the one cost
   function of every DP-SGD job, is recorded durably with the run's id before the adapter
   is saved in the run's private folder.
3. **Sample.** ``count`` texts (split evenly over the labels, as in-context runs split
   them) by ancestral sampling from the adapter, a chunk at a time; each chunk is appended
   and then marked written, so a resumed run neither trains nor charges again and never
   rewrites a text.

The unit and the relation are DP-SGD's: one record (or one user, every record of theirs
clipped jointly) added or removed. As in every DP-SGD job, the number of units is public by
declaration: the sampling rate and the steps are computed from it.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from privlm.accounting import Charge, PrivacyLedger
from privlm.accounting.budgeted import BudgetedRun
from privlm.curator import PUBLIC_SIZE
from privlm.data import Dataset, Record
from privlm.errors import PrivlmError
from privlm.models import LoadedModel
from privlm.progress import progress_bar
from privlm.randomness import PrivacyRandomness
from privlm.synth.batches import class_counts
from privlm.synth.config import SynthConfig
from privlm.training.config import DpSgdConfig

ADAPTER = "adapter"  # the DP adapter, in the run's private folder
SAMPLE_ROWS = 16  # texts sampled together (one forward pass per token for all of them)
MECHANISM_TEXT = (
    "dp-lora: a LoRA adapter of the public model fine-tuned with DP-SGD (Poisson-subsampled "
    "Gaussian, per-example clipping) on the records, each after its public context; the "
    "texts are ancestral samples from the adapter (post-processing: any number of texts)"
)


def context_text(description: str, label: str | None) -> str:
    """The public context every text continues: the description, the label, ``Text:``
    (the in-context generator's context too)."""
    head = f"{description}\n" if description else ""
    if label is not None:
        head += f"Label: {label}\n"
    return head + "Text:"


def training_text(record: Record, cfg: SynthConfig) -> str:
    """One record as a training text: its context, then the record on one line (when texts
    end at a newline) and a newline, the form the adapter is sampled in."""
    body = " ".join(record.text.split()) if cfg.stop_at_newline else record.text.strip()
    return f"{context_text(cfg.description, record.label)} {body}\n"


def training_data(data: Dataset, labels: list[str] | None, cfg: SynthConfig) -> Dataset:
    """The records DP-SGD trains on: those of the declared labels (all, unlabelled), each
    as :func:`training_text`, with its unit."""
    keep = set(labels) if labels else None
    rows = [
        replace(r, text=training_text(r, cfg))
        for r in data.records
        if keep is None or r.label in keep
    ]
    if not rows:
        raise PrivlmError("no record of the declared labels to train the generator on")
    return Dataset(rows, data.source, data.unit_kind)


def block_size(tokenizer: Any, cfg: SynthConfig, labels: list[str] | None) -> int:
    """Tokens per training example: the longest public context and ``max_tokens`` (a text
    is never sampled longer), and the newline and EOS after it. Public: no record's length
    enters."""
    declared: list[str | None] = list(labels) if labels else [None]
    heads = [context_text(cfg.description, label) for label in declared]
    longest = max(len(tokenizer(h, add_special_tokens=False)["input_ids"]) for h in heads)
    return max(8, longest + cfg.max_tokens + 2)


def dpsgd_config(cfg: SynthConfig, block: int, lm: LoadedModel) -> DpSgdConfig:
    """DP-SGD at the whole (ε, δ), as ``privlm train dpsgd`` runs it, on ``lm``'s placement."""
    place = lm.placement.describe()
    return DpSgdConfig(
        target_epsilon=cfg.epsilon, delta=cfg.delta, epochs=cfg.train_epochs,
        batch_size=cfg.train_batch_size, learning_rate=cfg.learning_rate, rank=cfg.lora_rank,
        block_size=block, seed=cfg.seed, device=place["device"], dtype=place["dtype"],
    )  # fmt: skip


def plan(
    lm: LoadedModel, data: Dataset, labels: list[str] | None, cfg: SynthConfig, mechanism: str
) -> tuple[Dataset, DpSgdConfig, Any, Charge]:
    """The training data, DP-SGD's config and run, and the run's charge (named
    ``mechanism``), before any work."""
    from privlm.training.dpsgd import plan_run

    train = training_data(data, labels, cfg)
    dcfg = dpsgd_config(cfg, block_size(lm.tokenizer, cfg, labels), lm)
    run = plan_run(train, dcfg)
    charge = run.charge(
        mechanism, dcfg.accountant, data.unit_kind,
        {"generator": "dp-lora", "model": lm.reference, "texts": cfg.count},
    )  # fmt: skip
    return train, dcfg, run, charge


def fit_and_save(
    lm: LoadedModel,
    train: Dataset,
    dcfg: DpSgdConfig,
    run: Any,
    ledger: PrivacyLedger | None,
    charge: Charge | None,
    folder: Path,
    progress: bool,
) -> None:
    """Train the adapter as planned, charge ``charge`` durably, then save the adapter in
    the run's private folder (atomically: a crash leaves none or all of it). ``charge``
    None: the run was charged before it stopped, and no adapter of it was saved."""
    from privlm.fsutil import write_directory_atomically
    from privlm.models.known_warnings import SAVE_EMBEDDING_LAYERS
    from privlm.training.dpsgd import fit_dpsgd, require_finite

    fitted = fit_dpsgd(lm, train, dcfg, run, progress=progress)

    def save() -> None:
        require_finite(fitted.trainable)
        write_directory_atomically(
            folder / ADAPTER,
            lambda d: fitted.adapted.save_pretrained(
                str(d), save_embedding_layers=SAVE_EMBEDDING_LAYERS
            ),
        )

    if charge is None:
        save()
        return
    BudgetedRun.start(ledger, "this synth run", charge).release(charge, save)


def statement_fields(run: Any, dcfg: DpSgdConfig, unit_kind: str) -> dict[str, Any]:
    """The DP-SGD run's public parameters for the synth statement."""
    from privlm.training.dpsgd import unit_description

    return {
        "relation": f"one {unit_kind} added or removed: DP-SGD with Poisson sampling of the "
        f"units ({unit_description(unit_kind, dcfg)}); the texts are post-processing of "
        "the adapter",
        "mechanism": MECHANISM_TEXT,
        "noise_multiplier": run.noise_multiplier, "sample_rate": run.sample_rate,
        "steps": run.steps, "max_grad_norm": dcfg.max_grad_norm, "accountant": dcfg.accountant,
        "lora_rank": dcfg.rank, "learning_rate": dcfg.learning_rate, "epochs": dcfg.epochs,
        "batch_size": dcfg.batch_size, "block_size": dcfg.block_size,
        "units": run.units, "data_size": PUBLIC_SIZE,
    }  # fmt: skip


class AdapterSampler:
    """Texts sampled from a model (the DP adapter, or the public model alone for the
    no-reference baseline), a chunk of rows at a time, ancestral sampling with a KV cache."""

    def __init__(self, model: Any, tokenizer: Any, cfg: SynthConfig) -> None:
        self.model, self.tokenizer, self.cfg = model.eval(), tokenizer, cfg
        self._newline: dict[int, bool] = {}

    def _ends_line(self, token: int) -> bool:
        if token not in self._newline:
            self._newline[token] = "\n" in self.tokenizer.decode([token])
        return self._newline[token]

    def texts(self, label: str | None, rows: int, rng: PrivacyRandomness) -> list[str]:
        """``rows`` texts continuing the label's context, each at most ``max_tokens``."""
        import torch

        cfg, tok = self.cfg, self.tokenizer
        device = next(self.model.parameters()).device
        head = tok(context_text(cfg.description, label), add_special_tokens=False)["input_ids"]
        ids = torch.tensor([head] * rows, device=device)
        gen = torch.Generator(device="cpu").manual_seed(rng.integer())
        out: list[list[int]] = [[] for _ in range(rows)]
        done = [False] * rows
        past = None
        with torch.no_grad():
            for _ in range(cfg.max_tokens):
                step = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = step.past_key_values
                probs = torch.softmax(step.logits[:, -1, :].float().cpu(), dim=-1)
                nxt = torch.multinomial(probs, 1, generator=gen)[:, 0].tolist()
                for i, t in enumerate(nxt):
                    if done[i]:
                        continue
                    if t == tok.eos_token_id or (cfg.stop_at_newline and self._ends_line(t)):
                        done[i] = True
                        if t != tok.eos_token_id:
                            out[i].append(t)
                        continue
                    out[i].append(t)
                if all(done):
                    break
                ids = torch.tensor(nxt, device=device)[:, None]
        texts = [tok.decode(o) for o in out]
        return [t.split("\n")[0].strip() if cfg.stop_at_newline else t.strip() for t in texts]


def planned_rows(count: int, labels: list[str] | None) -> list[str | None]:
    """Every output row's label, in output order (class by class)."""
    return [label for label, n in class_counts(count, labels) for _ in range(n)]


def sample_into(
    out: Path,
    sampler: AdapterSampler,
    labels: list[str] | None,
    cfg: SynthConfig,
    written: int,
    mark: Any,
    progress: bool,
    desc: str = "synthetic texts",
) -> int:
    """Append the texts after the ``written`` first to ``out``, a chunk at a time, each
    chunk flushed and then marked (``mark(n)``: the state's written count). A seeded run
    draws each chunk from its own stream, so a resume writes what an uninterrupted run
    would have."""
    rows = planned_rows(cfg.count, labels)
    bar = progress_bar(total=len(rows), initial=written, desc=desc, disable=not progress)
    i = written
    while i < len(rows):
        label = rows[i]
        n = 1
        while i + n < len(rows) and n < SAMPLE_ROWS and rows[i + n] == label:
            n += 1
        seed = None if cfg.seed is None else cfg.seed * 1_000_003 + i
        texts = sampler.texts(label, n, PrivacyRandomness(seed))
        with out.open("a") as f:
            for t in texts:
                row = {"text": t} if label is None else {"text": t, "label": label}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        i += n
        mark(i)
        bar.update(n)
    bar.close()
    return i


def load_adapter(lm: LoadedModel, folder: Path) -> Any:
    """The saved DP adapter on a copy of the public model (the caller's is left as is)."""
    from peft import PeftModel

    from privlm.models import working_copy

    place = lm.placement.describe()
    base = working_copy(lm, place["device"], place["dtype"])
    return PeftModel.from_pretrained(base.model, str(folder / ADAPTER)).eval()
