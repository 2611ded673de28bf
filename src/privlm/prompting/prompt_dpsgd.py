"""PromptDPSGD (Flocks App. C.1, Algorithm 1): DP-SGD on a soft prompt or a prefix, the LLM
frozen.

- ``soft-prompt``: prompt tuning, ``virtual_tokens`` (10) trainable input embeddings in
  front of the input (PEFT ``PromptTuningConfig``).
- ``prefix``: prefix tuning, trainable keys and values at every layer (PEFT
  ``PrefixTuningConfig``).

Each private example is the task's zero-shot template of one record; its loss is the
cross-entropy of the true class over the label tokens at the last position. Opacus does
the Poisson sampling, per-example clipping and noise; privlm's accountant calibrates σ for
the target ε over the planned steps (Theorem 1 of App. C.3 is the sampled Gaussian mechanism
of Abadi et al.). δ defaults to 1/N. The output is a PEFT prompt-learning adapter and
``privacy.json``; the base weights never change (tested).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
from opacus import PrivacyEngine
from opacus.utils.batch_memory_manager import BatchMemoryManager
from peft import (
    PeftModel,
    PrefixTuningConfig,
    PromptLearningConfig,
    PromptTuningConfig,
    TaskType,
    get_peft_model,
)
from torch.utils.data import DataLoader, TensorDataset

from privlm.accounting import (
    Charge,
    DpSgdPlan,
    PrivacyLedger,
    dpsgd_epsilon,
)
from privlm.accounting.advice import weak_delta_warning
from privlm.accounting.budgeted import BudgetedRun
from privlm.curator import PUBLIC, PUBLIC_SIZE, RANDOMNESS, Schema, release_statement
from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.fsutil import write_directory_atomically
from privlm.models import LoadedModel, ModelSource, reference_of, working_copy
from privlm.progress import LossMeter, progress_bar
from privlm.prompting.config import PROMPT_KINDS as PROMPT_KINDS
from privlm.prompting.config import UNITS as UNITS
from privlm.prompting.config import PromptDpSgdConfig as PromptDpSgdConfig
from privlm.prompting.tasks import Task, label_token_ids
from privlm.prompting.tasks import TaskExamples as TaskExamples
from privlm.randomness import PrivacyRandomness
from privlm.training.distributed_dp import LockstepPoissonSampler, collate_with_empty
from privlm.training.dpsgd import plan, plan_batches
from privlm.training.model_card import model_card
from privlm.training.secure_noise import SECURE_STATEMENT, install_csprng_noise


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
        self.register_buffer(
            "tokens", peft_model.prompt_tokens[adapter][:n].clone(), persistent=False
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


def prompt_run_cost(data: TaskExamples, cfg: PromptDpSgdConfig) -> tuple[float, float]:
    """(ε, δ) a private run on ``data`` costs, as its ledger composes it (a new ledger's
    default budget, so the run fits exactly once)."""
    records, _, _ = privacy_units(data.records, cfg.unit)
    q, steps, delta, sigma = plan(len(records), cfg)
    return dpsgd_epsilon(sigma, q, steps, delta, cfg.accountant).epsilon, delta


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
    and left unchanged) on ``data`` with DP-SGD (or without, if ``target_epsilon`` is None):
    plan, check, fit, charge, release (:mod:`privlm.accounting.budgeted`), with DP-SGD's own
    planning (:func:`privlm.training.dpsgd.plan`)."""
    cfg = cfg or PromptDpSgdConfig()
    task = data.task
    records, unit, left_out = privacy_units(data.records, cfg.unit)
    n = len(records)
    if n < 2:
        raise PrivlmError("PromptDPSGD needs at least 2 private examples")
    private = cfg.target_epsilon is not None
    q, steps, delta, sigma = plan(n, cfg) if private else (*plan_batches(n, cfg), 0.0, 0.0)
    charges: list[Charge] = []
    if private:
        accounted = DpSgdPlan(sigma, q, steps)
        charges.append(Charge(
            "prompt-dpsgd",
            rdp=accounted.rdp_curve(),
            event=accounted.event(),
            compose="pld" if cfg.accountant == "prv" else "rdp",
            params={"noise_multiplier": sigma, "sample_rate": q, "steps": steps, "kind": cfg.kind},
        ))  # fmt: skip
    budget = BudgetedRun.start(ledger, "this PromptDPSGD run", *charges)
    reference = reference_of(model)
    lm = working_copy(model, cfg.device, cfg.dtype)  # PEFT freezes its model's weights
    place = lm.placement
    label_ids = label_token_ids(task, lm.tokenizer)
    rng = PrivacyRandomness(cfg.seed)
    prompted = prompt_model(lm, cfg.kind, cfg.virtual_tokens, rng.integer())
    trainable = [(name, p) for name, p in prompted.named_parameters() if p.requires_grad]
    ids, mask, last, classes = encode_examples(lm, task, records, cfg.max_length)
    examples = TensorDataset(ids, mask, last, classes)
    if cfg.secure_mode:  # Poisson batches from CSPRNG coins, len(loader) = 1/q as Opacus's
        sampler = LockstepPoissonSampler(n, q, round(1 / q), 0, 1, None)
        loader = DataLoader(
            examples, batch_sampler=sampler, collate_fn=collate_with_empty(examples[0])
        )
    else:  # Opacus draws its Poisson batches with the loader's generator
        loader = DataLoader(
            examples,
            batch_size=cfg.batch_size,
            shuffle=not private,
            generator=rng.torch_generator(),
        )
    optimizer = torch.optim.AdamW([p for _, p in trainable], lr=cfg.learning_rate, weight_decay=0.0)
    run_model = training_module(prompted, cfg.kind)
    if private:
        engine = PrivacyEngine(accountant="rdp")
        run_model, optimizer, loader = engine.make_private(
            module=run_model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=cfg.max_grad_norm,
            poisson_sampling=not cfg.secure_mode,  # secure mode: the sampler above
            noise_generator=None if cfg.secure_mode else rng.torch_generator(place.device),
        )
        if cfg.secure_mode:
            install_csprng_noise(optimizer)
    before = {name: p.detach().clone() for name, p in trainable}
    run_model.train()
    bar = progress_bar(
        total=steps, desc=f"prompt-dpsgd ({cfg.kind})", unit="step", disable=not progress
    )
    t0 = time.perf_counter()
    meter = LossMeter()
    for _ in range(cfg.epochs):
        if private:
            with BatchMemoryManager(
                data_loader=loader,
                max_physical_batch_size=cfg.physical_batch_size,
                optimizer=optimizer,
            ) as mem:
                for batch in mem:
                    meter.add(*_step(run_model, optimizer, batch, label_ids, trainable, True,
                                     place.device))  # fmt: skip
                    if not optimizer._is_last_step_skipped:  # type: ignore[attr-defined]
                        bar.update(1)
                        meter.report(bar)
        else:
            for batch in loader:
                meter.add(*_step(run_model, optimizer, batch, label_ids, trainable, False,
                                 place.device))  # fmt: skip
                bar.update(1)
                meter.report(bar)
    bar.close()
    frozen = [name for name, p in trainable if torch.equal(p.detach(), before[name])]
    if frozen:
        raise PrivlmError(f"prompt parameters did not change during training: {frozen[:5]}")
    epsilon = dpsgd_epsilon(sigma, q, steps, delta, cfg.accountant).epsilon if private else None
    statement = PromptPrivacyStatement(
        epsilon, delta if private else None, sigma if private else None, q, steps,
        cfg.accountant, n, cfg.kind,
        unit=unit, device=str(place.device), dtype=place.describe()["dtype"],
        records_left_out=left_out,
        **(SECURE_STATEMENT if cfg.secure_mode else rng.statement()),
        delta_warning=weak_delta_warning(delta, n, unit) if private else None,
    )  # fmt: skip

    privacy = {
        **statement.to_dict(),
        "data_size": PUBLIC_SIZE,
        "max_grad_norm": cfg.max_grad_norm,
        "task": task.name,
        "model": reference,
        "training": asdict(cfg),
        "seconds": time.perf_counter() - t0,
    }

    def write() -> None:
        released = release_statement(privacy, RELEASES, out_dir)  # statistics beside

        def save(d: Path) -> None:
            prompted.save_pretrained(str(d))
            (d / "privacy.json").write_text(json.dumps(released, indent=2))
            (d / "README.md").write_text(model_card(released))  # after PEFT's own card

        write_directory_atomically(Path(out_dir), save)

    if private:
        budget.release(charges[0], write)
    else:
        write()
    return statement


def _step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: list[torch.Tensor],
    label_ids: list[int],
    trainable: list[tuple[str, torch.nn.Parameter]],
    private: bool,
    device: torch.device,
) -> tuple[Any, int]:
    """One (physical) step; returns the batch's summed loss (a detached tensor, read back
    only when shown) and its size."""
    ids, mask, last, classes = (t.to(device) for t in batch)
    shown: Any = 0.0
    optimizer.zero_grad(set_to_none=True)
    if len(ids) == 0:  # an empty Poisson batch: a noise-only step
        for _, p in trainable:
            p.grad_sample = torch.zeros(  # type: ignore[attr-defined]
                (0, *p.shape), dtype=p.dtype, device=p.device
            )
    else:
        logits = class_logits(model, ids, mask, last, label_ids)
        loss = torch.nn.functional.cross_entropy(logits, classes)
        loss.backward()
        shown = loss.detach() * len(ids)
        if private:
            missing = [n for n, p in trainable if getattr(p, "grad_sample", None) is None]
            if missing:
                raise PrivlmError(f"no per-sample gradient for {missing[:5]}")
    optimizer.step()
    return shown, len(ids)
