"""DP-SGD fine-tuning of LoRA adapters through Opacus (blog post 003; JFT's phase 2).

- Poisson sampling (Opacus's DP data loader), per-sample clipping to ``max_grad_norm``, and
  Gaussian noise with the σ that privlm's accountant calibrates for the target (ε, δ) over the
  planned steps (never overshooting ε). δ defaults to min(1/n^1.1, 1e-6), n the number of
  privacy units: strong for every n, so the default never draws privlm's weak-δ warning.
- One training example per privacy unit: a record, or, with user ids, all of a user's records
  joined (and truncated to the block size), so one user's influence is clipped jointly.
- Logical batches larger than memory run as physical batches (Opacus's BatchMemoryManager);
  the accounting depends only on the logical sampling rate and the number of logical steps.
- No silent failure (a known Opacus + PEFT trap): after the first backward pass every
  trainable parameter must hold a per-sample gradient, and after the first step every one
  must have moved; otherwise training stops with the parameter's name. Layers Opacus cannot
  handle are refused up front.

Output: a PEFT adapter and ``privacy.json``: ε, δ, σ, q, steps, accountant, unit.

Fail-closed with a ledger: a run whose cost would not fit is refused before training, and
the run's RDP curve is charged, durably, before the adapter is written; if that charge is
refused (another run spent the budget meanwhile), no adapter leaves.
"""

from __future__ import annotations

import itertools
import json
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from opacus.validators import ModuleValidator
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import TensorDataset

from privlm.accounting import (
    Charge,
    DpSgdPlan,
    PrivacyLedger,
    Relation,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
)
from privlm.accounting.advice import suggested_delta, weak_delta_warning
from privlm.accounting.budgeted import BudgetedRun
from privlm.accounting.statements import Guarantee, guarantee_of
from privlm.curator import PUBLIC, PUBLIC_SIZE, RANDOMNESS, Schema, release_statement
from privlm.data import Dataset
from privlm.detect import Detector
from privlm.errors import PrivlmError
from privlm.fsutil import write_directory_atomically
from privlm.models import ModelSource, reference_of
from privlm.models.known_warnings import SAVE_EMBEDDING_LAYERS
from privlm.models.placement import resolve_placement
from privlm.randomness import PrivacyRandomness
from privlm.training.checkpointing import enable_gradient_checkpointing
from privlm.training.config import GRAD_SAMPLE_MODES as GRAD_SAMPLE_MODES
from privlm.training.config import USER_SAMPLING as USER_SAMPLING
from privlm.training.config import DpSgdConfig as DpSgdConfig
from privlm.training.config import DpSgdPrivacy as DpSgdPrivacy
from privlm.training.distributed_dp import (
    barrier,
    init_distributed,
    rank_device,
    replicas_agree,
)
from privlm.training.dp_loop import DpLoop, PerExampleLoss, dp_fit
from privlm.training.lora_finetune import lora_model, record_sequences
from privlm.training.model_card import model_card
from privlm.training.redaction import (
    IGNORE,
    embed_with_masks,
    mask_embedding,
    per_example_losses,
    redacted_sequences,
    redacted_token_fraction,
)
from privlm.training.secure_noise import SECURE_STATEMENT
from privlm.training.user_level import (
    train_users_jointly,
    unit_token_counts,
    usage_when_blocking,
    usage_when_truncating,
    user_blocks,
)


@dataclass(frozen=True)
class PrivacyStatement:
    epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    steps: int
    accountant: str
    unit: str
    units: int
    max_grad_norm: float
    mechanism: str = (
        "DP-SGD (Poisson-subsampled Gaussian, per-example clipping), LoRA parameters only"
    )
    # JFT light noise: the rate the accountant used, q·m̃ (an empirical estimate, §3.1)
    accounted_sample_rate: float | None = None
    unit_detail: str = ""  # how a user-level unit's records enter a step
    token_usage: dict[str, Any] | None = None  # tokens trained on and dropped, per unit
    device: str = "cpu"
    dtype: str = "float32"  # of the base model's weights; LoRA parameters are float32
    # where the noise and batches came from; a seeded run carries the warning
    randomness: str = "fresh OS entropy (CSPRNG); no seed"
    seed: int | None = None
    warning: str | None = None
    delta_warning: str | None = None  # δ weak for the number of units

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# what a DP-SGD run's statement releases (privlm.curator.split_statement); every other key,
# token usage and times included, goes to the curator's report beside the adapter
RUN_RELEASES: Schema = {
    **dict.fromkeys(
        ("epsilon", "delta", "noise_multiplier", "sample_rate", "steps", "accountant", "unit",
         "units", "max_grad_norm", "mechanism", "accounted_sample_rate", "unit_detail",
         "device", "dtype", "delta_warning"), PUBLIC,
    ),
    **RANDOMNESS,
}  # fmt: skip
RELEASES: Schema = {
    **RUN_RELEASES,
    **dict.fromkeys(
        ("data_size", "training", "model", "init_adapter", "detector", "processes",
         # JFT's labels of a phase's adapter (training.jft.sdp_release_label)
         "guarantee_kind", "policy", "phase1_mode", "dp_epsilon", "not_dp", "miss_rate",
         "estimate"), PUBLIC,
    ),
}  # fmt: skip


def require_finite(params: Sequence[tuple[str, torch.Tensor]]) -> None:
    """Refuse to write an adapter with a NaN or infinite parameter. Its privacy cost stays
    charged: the noisy training ran on the data whether or not its result is usable."""
    bad = [name for name, p in params if not bool(torch.isfinite(p.detach()).all())]
    if bad:
        raise PrivlmError(
            f"DP-SGD produced non-finite parameters ({', '.join(bad[:3])}"
            f"{', …' if len(bad) > 3 else ''}); no adapter was written, and the run's privacy "
            "cost stays charged (it used the data). Lower the learning rate."
        )


def records_per_unit(dataset: Dataset) -> list[list[str]]:
    """Each privacy unit's record texts, units in first-seen order."""
    by_unit: dict[str, list[str]] = {}
    for r in dataset.records:
        by_unit.setdefault(r.unit, []).append(r.text)
    return list(by_unit.values())


class OneExamplePerUser(TorchDataset[tuple[torch.Tensor, ...]]):
    """Item ``u`` is one record of user ``u``, drawn afresh at every fetch. With Poisson
    sampling over users, each sampled user contributes exactly one clipped example to a
    step, so a user's influence on it is bounded by the clipping norm."""

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...],
        rows: list[list[int]],
        generator: torch.Generator | None,
    ):
        self.tensors = tensors
        self.rows = rows
        self.generator = generator  # None: secure mode, the pick from the OS CSPRNG

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, user: int) -> tuple[torch.Tensor, ...]:
        rows = self.rows[user]
        if self.generator is None:
            pick = rows[secrets.randbelow(len(rows))]
        else:
            pick = rows[int(torch.randint(len(rows), (1,), generator=self.generator))]
        return tuple(t[pick] for t in self.tensors)


def unit_description(unit: str, cfg: DpSgdConfig) -> str:
    if unit == "record":
        return "record"
    if cfg.user_sampling == "one-per-user":
        return f"{unit} (one example per sampled {unit})"
    cap = (
        f"at most {cfg.max_blocks_per_user} blocks of"
        if cfg.max_blocks_per_user
        else "every block of"
    )
    return (
        f"{unit} ({cap} a {unit}'s records, their gradients' {cfg.user_reduction} clipped jointly)"
    )


def examples_per_unit(dataset: Dataset) -> tuple[list[str], str]:
    """One training text per privacy unit (a user's records joined by newlines)."""
    if dataset.unit_kind == "record":
        return dataset.texts(), "record"
    return ["\n".join(v) for v in records_per_unit(dataset)], dataset.unit_kind


def _rows_by_unit(groups: list[list[str]]) -> list[list[int]]:
    """Each unit's record indices in the flat list of records, units in order."""
    starts = [0, *itertools.accumulate(len(g) for g in groups)]
    return [list(range(a, b)) for a, b in itertools.pairwise(starts)]


def _split_by_group(flat: list[Any], groups: list[list[str]]) -> list[list[Any]]:
    """``flat`` (one item per record, units in order) regrouped by unit."""
    out, i = [], 0
    for g in groups:
        out.append(flat[i : i + len(g)])
        i += len(g)
    return out


def plan_batches(n_units: int, cfg: DpSgdPrivacy) -> tuple[float, int]:
    """(q, steps) for ``n_units`` examples: Opacus's q = 1/len(loader)."""
    batches = max(1, math.ceil(n_units / cfg.batch_size))
    return 1.0 / batches, cfg.epochs * batches


def masked_token_loss(model: torch.nn.Module, mask_vector: torch.Tensor) -> PerExampleLoss:
    """Each example's mean next-token loss over its labelled tokens, JFT's redacted tokens
    entering as the mask embedding (A.2) where a batch has any (embedded by ``model``, the
    unwrapped module; the forward pass runs through the one the loop gives)."""

    def loss(wrapped: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y, m = batch
        attention = ((y != IGNORE) | m).long()
        if bool(m.any()):
            embeds = embed_with_masks(model, x, m, mask_vector)
            logits = wrapped(inputs_embeds=embeds, attention_mask=attention).logits
        else:
            logits = wrapped(input_ids=x, attention_mask=attention).logits
        return per_example_losses(logits, y)

    return loss


@dataclass(frozen=True)
class DpSgdRun:
    """A planned DP-SGD run: its sampling rate, steps, δ and σ for ``units`` privacy units,
    and the rate its accountant uses (q·``rate_factor``: JFT's light noise). The one cost
    function of every DP-SGD job (LoRA, JFT's phases, PromptDPSGD): its ε, its ledger charge.
    A non-private baseline (``noise="none"``) is a run with σ = 0 and nothing to charge."""

    units: int
    sample_rate: float
    steps: int
    delta: float
    noise_multiplier: float
    rate_factor: float = 1.0

    @classmethod
    def plan(cls, n_units: int, cfg: DpSgdPrivacy, rate_factor: float = 1.0) -> DpSgdRun:
        """Step 1 of :mod:`privlm.accounting.budgeted` for ``n_units`` examples (a count public
        by declaration), before any data is read: q and steps from the batch size and
        epochs; δ as given or :func:`~privlm.accounting.advice.suggested_delta`; σ as
        ``cfg.noise`` chooses (calibrated to the target ε, never overshooting it, or fixed).

        ``rate_factor`` < 1 calibrates σ at the rate q·rate_factor instead of q: JFT's light
        noise, where only the detector's misses (rate m̃) need protection (JFT §3.1)."""
        if not 0 < rate_factor <= 1:
            raise PrivlmError(f"the sampling-rate factor must lie in (0, 1], got {rate_factor}")
        q, steps = plan_batches(n_units, cfg)
        if cfg.noise == "none":
            return cls(n_units, q, steps, 0.0, 0.0)
        delta = cfg.delta if cfg.delta is not None else suggested_delta(n_units)
        if cfg.noise == "noise-multiplier":
            assert cfg.noise_multiplier is not None  # the config's own check
            sigma = cfg.noise_multiplier
        else:
            sigma = calibrate_noise_multiplier(
                cfg.target_epsilon, delta, q * rate_factor, steps, cfg.accountant
            ).noise_multiplier
        return cls(n_units, q, steps, delta, sigma, rate_factor)

    @property
    def private(self) -> bool:
        return self.noise_multiplier > 0

    @property
    def accounted_rate(self) -> float:
        return self.sample_rate * self.rate_factor

    def epsilon(self, accountant: str) -> float:
        """The run's ε at its δ, by ``accountant`` (RDP, or PLD for prv), at the accounted
        rate."""
        if not self.private:
            raise PrivlmError("a non-private run has no ε")
        report = dpsgd_epsilon(
            self.noise_multiplier, self.accounted_rate, self.steps, self.delta, accountant
        )
        return float(report.epsilon)

    def guarantee(self, accountant: str, unit: str) -> Guarantee:
        """What the run's charge guarantees: (ε, δ) composed from the very charge the ledger
        records (privlm.accounting.statements), not restated from the settings."""
        return guarantee_of([self.charge("dpsgd", accountant, unit)], self.delta)

    def charge(
        self, name: str, accountant: str, unit: str, params: dict[str, Any] | None = None
    ) -> Charge:
        """What the run costs, as a ledger charge (composed by PLD under ``prv``);
        ``params`` adds the job's own labels (its model, its prompt kind)."""
        if not self.private:
            raise PrivlmError("a non-private run is not charged: it has no guarantee")
        accounted = DpSgdPlan(self.noise_multiplier, self.accounted_rate, self.steps)
        return Charge(
            name,
            rdp=accounted.rdp_curve(),
            event=accounted.event(),
            compose="pld" if accountant == "prv" else "rdp",
            unit=unit,
            relation=Relation.of_unit_kind(unit),
            params={
                "noise_multiplier": self.noise_multiplier,
                "sample_rate": self.sample_rate,
                "accounted_sample_rate": self.accounted_rate,
                "steps": self.steps,
                **(params or {}),
            },
        )

    def loop(self, cfg: DpSgdPrivacy) -> DpLoop:
        """The step loop that trains as planned (:mod:`privlm.training.dp_loop`)."""
        return DpLoop.of(cfg, self.noise_multiplier, self.sample_rate, self.steps, self.private)


def plan_run(dataset: Dataset, cfg: DpSgdConfig, rate_factor: float = 1.0) -> DpSgdRun:
    """:meth:`DpSgdRun.plan` for ``dataset``'s privacy units."""
    return DpSgdRun.plan(len(records_per_unit(dataset)), cfg, rate_factor)


@dataclass
class FittedAdapter:
    """A DP-SGD adapter trained but not yet released: its model, its statement and what
    ``privacy.json`` will hold (the curator's statistics are split off when it is written)."""

    adapted: Any
    trainable: Sequence[tuple[str, torch.Tensor]]
    statement: PrivacyStatement
    privacy: dict[str, Any]
    rank: int


def train_dpsgd(
    model: ModelSource,
    dataset: Dataset,
    out_dir: str | Path,
    cfg: DpSgdConfig | None = None,
    *,
    ledger: PrivacyLedger | None = None,
    progress: bool = True,
) -> PrivacyStatement:
    """Fine-tune a LoRA adapter of ``model`` (a name, or a loaded model, which is copied and
    left unchanged) with DP-SGD; charge ``ledger`` (if given), then save the adapter and its
    privacy statement: plan, check, fit, charge, release (:mod:`privlm.accounting.budgeted`)."""
    cfg = cfg or DpSgdConfig()
    run = plan_run(dataset, cfg)
    charge = run.charge("dpsgd", cfg.accountant, dataset.unit_kind, {"model": reference_of(model)})
    budget = BudgetedRun.start(ledger, "this DP-SGD run", charge)
    fitted = fit_dpsgd(model, dataset, cfg, run, progress=progress)
    return release_adapter(fitted, out_dir, budget, charge)


def release_adapter(
    fitted: FittedAdapter,
    out_dir: str | Path,
    budget: BudgetedRun,
    charge: Charge,
    extra: dict[str, Any] | None = None,
) -> PrivacyStatement:
    """Charge ``charge`` durably, then write the adapter, ``privacy.json`` (``extra`` merged
    in) and its card to ``out_dir``; the exact statistics go to the curator's report. Under
    torchrun only rank 0 charges and writes."""
    out = Path(out_dir)

    def write() -> None:
        require_finite(fitted.trainable)  # after the charge: the run used the data either way
        privacy = release_statement({**fitted.privacy, **(extra or {})}, RELEASES, out)

        def save(d: Path) -> None:
            fitted.adapted.save_pretrained(str(d), save_embedding_layers=SAVE_EMBEDDING_LAYERS)
            (d / "privacy.json").write_text(json.dumps(privacy, indent=2))
            (d / "README.md").write_text(model_card(privacy))  # after PEFT's own card

        write_directory_atomically(out, save)

    if fitted.rank == 0:  # one charge and one adapter, however many processes trained
        budget.release(charge, write)
    barrier()
    return fitted.statement


def _examples(
    tokenizer: Any,
    groups: list[list[str]],
    texts: list[str],
    spans: list[Any] | None,
    cfg: DpSgdConfig,
    one_per_user: bool,
    rng: PrivacyRandomness,
) -> TorchDataset[tuple[torch.Tensor, ...]]:
    """One example per record (cut at the block size, redacted where ``spans`` are given),
    or one random record of each sampled user per step."""
    if spans is not None:
        enc = redacted_sequences(tokenizer, texts, spans, cfg.block_size)
        ids, labels, masked = enc.ids, enc.labels, enc.masked
    else:
        ids, labels = record_sequences(tokenizer, texts, cfg.block_size)
        masked = torch.zeros_like(ids, dtype=torch.bool)
    if one_per_user:
        coins = None if cfg.secure_mode else rng.torch_generator()
        return OneExamplePerUser((ids, labels, masked), _rows_by_unit(groups), coins)
    return TensorDataset(ids, labels, masked)


def _statement(
    run: DpSgdRun,
    cfg: DpSgdConfig,
    unit: str,
    token_usage: dict[str, Any],
    place: Any,
    rng: PrivacyRandomness,
) -> PrivacyStatement:
    """What the run guarantees, at the rate its accountant used: ε from its charge."""
    return PrivacyStatement(
        run.guarantee(cfg.accountant, unit).epsilon, run.delta, run.noise_multiplier, run.sample_rate, run.steps,
        cfg.accountant, unit, run.units, cfg.max_grad_norm,
        accounted_sample_rate=run.accounted_rate if run.rate_factor != 1.0 else None,
        unit_detail=unit_description(unit, cfg),
        token_usage=token_usage,
        device=str(place.device),
        dtype=place.describe()["dtype"],
        **(SECURE_STATEMENT if cfg.secure_mode else rng.statement()),
        delta_warning=weak_delta_warning(run.delta, run.units, unit),
    )  # fmt: skip


def fit_dpsgd(
    model: ModelSource,
    dataset: Dataset,
    cfg: DpSgdConfig,
    run: DpSgdRun,
    *,
    init_adapter: str | Path | None = None,
    init_from: str | None = None,
    detector: Detector | None = None,
    progress: bool = True,
) -> FittedAdapter:
    """Step 3: train the adapter as ``run`` planned, releasing nothing. JFT composes DP-SGD
    through this step: ``init_adapter`` continues from a saved adapter (phase 2 from phase
    1), which the statement describes as ``init_from`` (never by its path: a released file
    names no local path), ``detector`` redacts every example first (A.2 masks), and a run
    planned with a rate factor accounts at q·m̃ (light noise)."""
    reference = reference_of(model)
    groups = records_per_unit(dataset)
    unit = dataset.unit_kind
    one_per_user = unit != "record" and cfg.user_sampling == "one-per-user"
    texts = [t for g in groups for t in g]  # every record, units in order
    q, steps, sigma = run.sample_rate, run.steps, run.noise_multiplier
    rng = PrivacyRandomness(cfg.seed)
    wanted = resolve_placement(cfg.device, cfg.dtype)
    device = rank_device(wanted.device)  # under torchrun on GPUs: this rank's own GPU
    rank, world = init_distributed(device)  # NCCL on GPUs, gloo on CPUs
    lm, adapted, _ = lora_model(
        model, cfg.rank, cfg.alpha, cfg.targets, rng.integer(), init_adapter=init_adapter,
        device=device, dtype=wanted.dtype,
    )  # fmt: skip
    place = lm.placement
    joint = unit != "record" and not one_per_user
    if joint and (cfg.grad_sample_mode != "hooks" or world > 1):
        raise PrivlmError(
            "user-level DP-SGD with joint clipping sums each user's per-block gradients before "
            "clipping: it runs in hooks mode (--grad-sample-mode hooks), in one process"
        )
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(adapted, distributed=world > 1)
    errors = ModuleValidator.validate(adapted, strict=False)
    if errors:
        raise PrivlmError(f"layers DP-SGD cannot train here: {[str(e) for e in errors][:5]}")
    counts = unit_token_counts(lm.tokenizer, groups)
    usage = (
        usage_when_blocking(counts, cfg.block_size, cfg.max_blocks_per_user)
        if joint
        else usage_when_truncating(counts, cfg.block_size, f"the block size of {cfg.block_size}")
    )
    spans = detector.detect(texts) if detector is not None else None
    redacted_fraction = (
        redacted_token_fraction(lm.tokenizer, texts, spans) if spans is not None else None
    )
    mask_vector = mask_embedding(lm.model, lm.tokenizer)
    trainable = [(name, p) for name, p in adapted.named_parameters() if p.requires_grad]
    t0 = time.perf_counter()
    if joint:
        blocks = user_blocks(
            lm.tokenizer, groups, cfg.block_size, cfg.max_blocks_per_user,
            _split_by_group(spans, groups) if spans is not None else None,
        )  # fmt: skip
        train_users_jointly(
            adapted, blocks, sigma=sigma, max_grad_norm=cfg.max_grad_norm, sample_rate=q,
            steps=steps, physical_batch_size=cfg.physical_batch_size,
            learning_rate=cfg.learning_rate, reduction=cfg.user_reduction,
            sampling=None if cfg.secure_mode else rng.torch_generator(),
            noise=None if cfg.secure_mode else rng.torch_generator(place.device),
            mask_vector=mask_vector, progress=progress,
        )  # fmt: skip
    else:
        examples = _examples(lm.tokenizer, groups, texts, spans, cfg, one_per_user, rng)
        dp_fit(
            adapted, examples, run.loop(cfg), masked_token_loss(adapted, mask_vector), rng=rng,
            device=place.device, rank_world=(rank, world), progress=progress,
        )  # fmt: skip
    if not replicas_agree([p for _, p in trainable]):
        raise PrivlmError("the DPDDP replicas hold different parameters after training")
    statement = _statement(run, cfg, unit, usage.to_dict(), place, rng)
    full = {
        **statement.to_dict(),
        "data_size": PUBLIC_SIZE,
        "training": asdict(cfg),
        "model": reference,
        "init_adapter": None if init_adapter is None else (init_from or "a saved adapter"),
        "detector": detector.name if detector is not None else None,
        "redacted_token_fraction": redacted_fraction,
        "seconds": time.perf_counter() - t0,
        "processes": world,
    }
    return FittedAdapter(adapted, trainable, statement, full, rank)
