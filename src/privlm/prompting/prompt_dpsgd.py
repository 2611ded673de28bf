"""PromptDPSGD (Flocks App. C.1, Algorithm 1): DP-SGD on a soft prompt or a prefix, the LLM
frozen.

- ``soft-prompt``: prompt tuning, ``virtual_tokens`` (10) trainable input embeddings in
  front of the input (PEFT ``PromptTuningConfig``).
- ``prefix``: prefix tuning, trainable keys and values at every layer (PEFT
  ``PrefixTuningConfig``).

Each private example is the task's zero-shot template of one record; its loss is the
cross-entropy of the true class over the label tokens at the last position. The run is
planned and trained by DP-SGD's one core, as LoRA's DP-SGD is: :class:`DpSgdRun` plans q,
steps, δ (default min(1/n^1.1, 1e-6)) and σ (calibrated to the target ε, or fixed: the
config's ``noise``; Theorem 1 of App. C.3 is the sampled Gaussian mechanism of Abadi et al.)
and gives the charge; :func:`~privlm.training.dp_loop.dp_fit` runs Opacus's Poisson
sampling, per-example clipping and noise, with its finite-loss check and secure mode. The
output is a PEFT prompt-learning adapter and ``privacy.json``; the base weights never
change (tested).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from peft import (
    PeftModel,
    PrefixTuningConfig,
    PromptLearningConfig,
    PromptTuningConfig,
    TaskType,
    get_peft_model,
)
from torch.utils.data import TensorDataset

from privlm.accounting import Charge, PrivacyLedger
from privlm.accounting.advice import weak_delta_warning
from privlm.accounting.budgeted import BudgetedRun
from privlm.curator import PUBLIC, PUBLIC_SIZE, RANDOMNESS, Schema, release_statement
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.fsutil import write_directory_atomically
from privlm.models import LoadedModel, ModelSource, reference_of, working_copy
from privlm.models.known_warnings import SAVE_EMBEDDING_LAYERS
from privlm.prompting.config import PROMPT_KINDS as PROMPT_KINDS
from privlm.prompting.config import UNITS as UNITS
from privlm.prompting.config import PromptDpSgdConfig as PromptDpSgdConfig
from privlm.prompting.tasks import Task, label_token_ids
from privlm.prompting.tasks import TaskExamples as TaskExamples
from privlm.randomness import PrivacyRandomness
from privlm.training.dp_loop import PerExampleLoss, dp_fit
from privlm.training.dpsgd import DpSgdRun
from privlm.training.model_card import model_card
from privlm.training.secure_noise import SECURE_STATEMENT


def privacy_units(records: list[Record], unit: str) -> tuple[list[Record], str, int]:
    """The examples DP-SGD samples, the unit they protect, and how many records were left out.

    DP-SGD here clips one example at a time, so it protects one *example*. A user with
    several records would be protected only by group privacy, so:

    - ``auto``: one record per unit is protected as that unit (the user, where the data
      names users); a unit with several records is refused, saying what to choose;
    - ``record``: every record, protected as a record (a user with k records gets the
      group-privacy guarantee of k records, not ε);
    - ``user``: each user's first record only, so the guarantee is per user; the rest are
      left out and counted.
    """
    if unit not in UNITS:
        raise PrivlmError(f"unit must be one of {', '.join(UNITS)}, not {unit!r}")
    by_user = not all(r.unit.startswith("record-") for r in records)
    if unit == "record" or not by_user:
        return records, "record", 0
    firsts = list({r.unit: r for r in reversed(records)}.values())[::-1]
    if unit == "auto" and len(firsts) < len(records):
        raise PrivlmError(
            f"the private data names {len(firsts)} users with {len(records)} records; "
            "PromptDPSGD clips one example at a time, so it cannot protect a user with several "
            "records at ε. Choose --unit user (each user's first record, the guarantee per "
            "user) or --unit record (every record, the guarantee per record)"
        )
    return firsts, "user", len(records) - len(firsts)


# what a soft prompt's privacy.json releases (privlm.curator.split_statement)
RELEASES: Schema = {
    **dict.fromkeys(
        ("epsilon", "delta", "noise_multiplier", "sample_rate", "steps", "accountant", "units",
         "kind", "unit", "device", "dtype", "mechanism", "delta_warning", "data_size",
         "max_grad_norm", "task", "model", "training"), PUBLIC,
    ),
    **RANDOMNESS,
}  # fmt: skip


@dataclass(frozen=True)
class PromptPrivacyStatement:
    epsilon: float | None
    delta: float | None
    noise_multiplier: float | None
    sample_rate: float
    steps: int
    accountant: str
    units: int
    kind: str
    unit: str = "record"
    device: str = "cpu"
    dtype: str = "float32"  # of the frozen model; the prompt parameters are float32
    mechanism: str = "DP-SGD on prompt parameters only (PromptDPSGD); the LLM is frozen"
    randomness: str = "fresh OS entropy (CSPRNG); no seed"
    seed: int | None = None
    warning: str | None = None
    delta_warning: str | None = None  # δ weak for the number of units
    records_left_out: int = 0  # --unit user: the records after each user's first

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompt_model(lm: LoadedModel, kind: str, virtual_tokens: int, seed: int) -> PeftModel:
    """A PEFT soft prompt (random init) or prefix. The prefix's keys and values start at
    zero: PEFT's N(0, 1) init puts large random keys and values in every layer, which
    swamps the model (SST-2 stays at chance after an epoch), while zero keys and values
    only dilute attention a little and train (0.92 on SST-2 after one non-private epoch,
    docs/results.md). The init is data-independent, so the accounting is unchanged."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "soft-prompt":
            config: Any = PromptTuningConfig(
                task_type=TaskType.CAUSAL_LM, num_virtual_tokens=virtual_tokens
            )
        else:
            config = PrefixTuningConfig(
                task_type=TaskType.CAUSAL_LM, num_virtual_tokens=virtual_tokens
            )
        model: PeftModel = get_peft_model(lm.model, config)
        if kind == "prefix":
            with torch.no_grad():
                for p in model.parameters():
                    if p.requires_grad:
                        p.zero_()
        return model


class BatchedSoftPrompt(torch.nn.Module):
    """The soft prompt embedded once *per row*, then the frozen model on [prompt; input].

    PEFT's own prompt-tuning forward embeds the prompt for one row and repeats it over the
    batch (a memory saving; peft's GitHub issue 2043), so Opacus sees a batch of one at the prompt
    embedding and its per-sample gradients are wrong: a silent privacy bug that
    ``tests/prompting/test_prompt_dpsgd.py`` reproduces. Training therefore goes through
    this module; it shares PEFT's parameters, so the adapter is saved in PEFT's format."""

    tokens: torch.Tensor  # the virtual tokens' ids (a buffer)

    def __init__(self, peft_model: PeftModel) -> None:
        super().__init__()
        adapter = peft_model.active_adapter
        self.prompt: torch.nn.Module = peft_model.prompt_encoder[adapter]
        self.base: Any = peft_model.get_base_model()
        n = cast(PromptLearningConfig, peft_model.peft_config[adapter]).num_virtual_tokens
        # PEFT keeps its virtual-token ids on the CPU whatever the model's device; as a buffer
        # they follow this module from here on
        device = next(self.prompt.parameters()).device
        self.register_buffer(
            "tokens", peft_model.prompt_tokens[adapter][:n].clone().to(device), persistent=False
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        b = input_ids.size(0)
        prompts = self.prompt(self.tokens.unsqueeze(0).expand(b, -1))
        embeds = self.base.get_input_embeddings()(input_ids)
        ones = torch.ones(
            b, prompts.size(1), dtype=attention_mask.dtype, device=attention_mask.device
        )
        return self.base(
            inputs_embeds=torch.cat([prompts.to(embeds.dtype), embeds], 1),
            attention_mask=torch.cat([ones, attention_mask], 1),
        )


def training_module(model: PeftModel, kind: str) -> torch.nn.Module:
    """What DP-SGD runs: the batched soft prompt, or PEFT's prefix model (which embeds the
    prefix per row already)."""
    return BatchedSoftPrompt(model) if kind == "soft-prompt" else model


def encode_examples(
    lm: LoadedModel, task: Task, records: list[Record], max_length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask, last-token index and class, one row per record."""
    tok = lm.tokenizer
    enc = [
        tok(task.template(r), add_special_tokens=False)["input_ids"][-max_length:] for r in records
    ]
    width = max(len(e) for e in enc)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.full((len(enc), width), pad, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e)] = torch.tensor(e)
        mask[i, : len(e)] = 1
    last = mask.sum(1) - 1
    classes = torch.tensor([task.class_of(r) for r in records])
    return ids, mask, last, classes


def class_logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    last: torch.Tensor,
    label_ids: list[int],
) -> torch.Tensor:
    """Logits of the label tokens after each row's last real token, (B, classes), in
    float32 whatever the model's dtype (the loss and its gradients are never bf16)."""
    logits = model(input_ids=ids, attention_mask=mask).logits
    offset = logits.size(1) - ids.size(1)  # soft prompts add their positions in front
    rows = torch.arange(ids.size(0), device=logits.device)
    scores: torch.Tensor = logits[rows, offset + last.to(logits.device)][:, label_ids].float()
    return scores


@dataclass(frozen=True)
class PromptRun:
    """A planned PromptDPSGD run: the examples DP-SGD samples, the unit they protect, the
    records left out (``--unit user``) and DP-SGD's own plan for them
    (:class:`~privlm.training.dpsgd.DpSgdRun`: q, steps, δ, σ; its ε and its charge)."""

    records: list[Record]
    unit: str
    left_out: int
    run: DpSgdRun

    @classmethod
    def plan(cls, data: TaskExamples, cfg: PromptDpSgdConfig) -> PromptRun:
        """Step 1 of :mod:`privlm.accounting.budgeted`, before any example is read: the
        number of units (public by declaration) and the settings fix the cost."""
        records, unit, left_out = privacy_units(data.records, cfg.unit)
        if len(records) < 2:
            raise PrivlmError("PromptDPSGD needs at least 2 private examples")
        return cls(records, unit, left_out, DpSgdRun.plan(len(records), cfg))

    def charge(self, cfg: PromptDpSgdConfig) -> Charge:
        return self.run.charge("prompt-dpsgd", cfg.accountant, self.unit, {"kind": cfg.kind})


def class_loss(label_ids: list[int]) -> PerExampleLoss:
    """Each example's cross-entropy of its true class over the label tokens at its last
    position (Flocks App. C.1)."""

    def loss(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, last, classes = batch
        logits = class_logits(model, ids, mask, last, label_ids)
        return torch.nn.functional.cross_entropy(logits, classes, reduction="none")

    return loss


def train_prompt_dpsgd(
    model: ModelSource,
    data: TaskExamples,
    out_dir: str | Path,
    cfg: PromptDpSgdConfig | None = None,
    *,
    ledger: PrivacyLedger | None = None,
    progress: bool = True,
) -> PromptPrivacyStatement:
    """Train a soft prompt or prefix of ``model`` (a name, or a loaded model, which is copied
    and left unchanged) on ``data`` with DP-SGD (or, with ``noise="none"``, the non-private
    baseline): plan, check, fit, charge, release (:mod:`privlm.accounting.budgeted`), with
    DP-SGD's own plan and step loop (:class:`~privlm.training.dpsgd.DpSgdRun`,
    :func:`~privlm.training.dp_loop.dp_fit`)."""
    cfg = cfg or PromptDpSgdConfig()
    planned = PromptRun.plan(data, cfg)
    run = planned.run
    charges = [planned.charge(cfg)] if run.private else []
    budget = BudgetedRun.start(ledger, "this PromptDPSGD run", *charges)
    reference = reference_of(model)
    lm = working_copy(model, cfg.device, cfg.dtype)  # PEFT freezes its model's weights
    place = lm.placement
    label_ids = label_token_ids(data.task, lm.tokenizer)
    rng = PrivacyRandomness(cfg.seed)
    prompted = prompt_model(lm, cfg.kind, cfg.virtual_tokens, rng.integer())
    examples = TensorDataset(*encode_examples(lm, data.task, planned.records, cfg.max_length))
    t0 = time.perf_counter()
    dp_fit(
        training_module(prompted, cfg.kind), examples, run.loop(cfg), class_loss(label_ids),
        rng=rng, device=place.device, progress=progress, desc=f"prompt-dpsgd ({cfg.kind})",
    )  # fmt: skip
    statement = PromptPrivacyStatement(
        run.guarantee(cfg.accountant, planned.unit).epsilon if run.private else None,
        run.delta if run.private else None,
        run.noise_multiplier if run.private else None,
        run.sample_rate, run.steps, cfg.accountant, run.units, cfg.kind,
        unit=planned.unit, device=str(place.device), dtype=place.describe()["dtype"],
        records_left_out=planned.left_out,
        **(SECURE_STATEMENT if cfg.secure_mode else rng.statement()),
        delta_warning=weak_delta_warning(run.delta, run.units, planned.unit)
        if run.private else None,
    )  # fmt: skip
    privacy = {
        **statement.to_dict(),
        "data_size": PUBLIC_SIZE,
        "max_grad_norm": cfg.max_grad_norm,
        "task": data.task.name,
        "model": reference,
        "training": asdict(cfg),
        "seconds": time.perf_counter() - t0,
    }

    def write() -> None:
        released = release_statement(privacy, RELEASES, out_dir)  # statistics beside

        def save(d: Path) -> None:
            prompted.save_pretrained(str(d), save_embedding_layers=SAVE_EMBEDDING_LAYERS)
            (d / "privacy.json").write_text(json.dumps(released, indent=2))
            (d / "README.md").write_text(model_card(released))  # after PEFT's own card

        write_directory_atomically(Path(out_dir), save)

    if charges:
        budget.release(charges[0], write)
    else:
        write()
    return statement
