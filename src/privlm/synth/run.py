"""``privlm synth``: a DP synthetic dataset from private records (plan → check → charge →
generate, resumable).

Each text is generated from one disjoint batch of units (:mod:`privlm.synth.batches`). Its
members are the public model prompted with their records (in-context members, as in Amin et
al. 2024), and every token is one PMixED release over them (the mollified mixture at q = 1,
:mod:`privlm.predict.pmixed`), charged token by token to the text's own ledger before it is
released. A unit is in one batch (or one per declared label, for a user whose records carry
several): its loss is that many texts' losses, whatever the number of texts (parallel
composition; docs/sharp_edges.md, "DP synthetic text").

1. **Plan and check.** A unit's records reach one text, or one per declared label for a
   user: each text is calibrated to that share of (ε, δ), so the run's per-unit cost, the
   texts a unit reaches composed, is the (ε, δ) asked for. It is checked against the
   dataset's ledger before any work.
2. **Charge.** It is recorded durably, with the run's id, before the first text.
3. **Generate.** Each text's tokens are charged to its own ledger (in the run's private
   folder) before they are released; a text is appended to the output and then marked
   written. A run that stops resumes from its state: the dataset's ledger is not charged
   twice, a written text is never generated again, and a text interrupted half-way is lost
   (its tokens were charged), never redrawn from the same batch.

What leaves: the texts (``text``, ``label``) and the privacy statement beside them
(``<out>.privacy.json``), which holds settings and the guarantee only; the guarantee is
computed from the run's charges (:mod:`privlm.accounting.statements`), never restated from
the settings. Exact counts of the
data (units, records per member, records of undeclared labels) are the curator's, returned
apart and never written beside the output. No work depends on the data's sizes: the number
of texts and members is public, every member's prompt is padded to ``prompt_tokens`` (a
member without records is the public model), and every member is evaluated at every token.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privlm.accounting import Budget, Charge, PrivacyLedger, Relation
from privlm.accounting.budgeted import BudgetedRun
from privlm.accounting.statements import Guarantee, guarantee_of, recorded_guarantee
from privlm.data import Dataset
from privlm.data.partition import KEY_BYTES
from privlm.errors import PrivlmError
from privlm.fsutil import write_json_atomically, write_text_atomically
from privlm.models import LoadedModel, ModelSource, load_public_model
from privlm.progress import progress_bar
from privlm.randomness import PrivacyRandomness
from privlm.synth.batches import (
    Batch,
    batches_per_unit,
    plan_batches,
    public_batches,
    unit_counts,
)
from privlm.synth.config import CountPlan, SynthConfig, plan_count, refuse_a_baseline_count
from privlm.synth.labels import declared_labels as declared_labels
from privlm.synth.run_folder import refuse_a_started_run, run_folder
from privlm.synth.scrub import NO_SCRUB, scrubbed, statement_field

MECHANISM = "synth"
COUNT_MECHANISM = "synth-count"
RUN_MECHANISMS = (MECHANISM, COUNT_MECHANISM)
STATE_FORMAT = "privlm-synth-state/1"
STATEMENT_FORMAT = "privlm-synth/1"
BASELINE_FORMAT = "privlm-synth-baseline/1"
EXAMPLE = "Text: {text}\n"  # one record in a member's prompt
STATEMENT_SUFFIX = ".privacy.json"
MECHANISM_TEXT = {
    "pmixed": "PMixED mollified mixture (q = 1) of in-context members, per token",
    "dclip": "DClip: clipped exponential mechanism (InvisibleInk) over in-context members, "
    "on an expanded public top-k, per token",
    "screened": "Screened PMixED: a sparse-vector test per token sends it to the public model "
    "(free) or to a paid PMixED mixture (q = 1) of in-context members; paid_tokens per text",
}


def statement_path(out: Path) -> Path:
    return out.with_name(out.name + STATEMENT_SUFFIX)


@dataclass
class SynthResult:
    """What a run wrote, its released statement and the curator's exact counts."""

    out: Path
    statement: dict[str, Any]
    written: int
    lost: int
    curator: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out), "statement": self.statement, "written": self.written,
            "lost": self.lost, "not_private_for_the_curator": self.curator,
        }  # fmt: skip


def plan_config(config: SynthConfig, labels: list[str] | None, unit_kind: str) -> SynthConfig:
    """``config`` with each text calibrated to its share: one over the batches one unit's
    records can reach (:func:`batches_per_unit`)."""
    return config.for_texts_per_unit(batches_per_unit(labels, unit_kind))


def plan_charge(config: SynthConfig, labels: list[str] | None, unit_kind: str) -> Charge:
    """The run's per-unit cost: one text's ``max_tokens`` tokens, times the batches one
    unit can be in (``config`` as :func:`plan_config` makes it: each text at that share)."""
    times = batches_per_unit(labels, unit_kind)
    if config.texts_per_unit != times:
        raise PrivlmError(
            f"the plan needs each text at 1/{times} of the budget (plan_config), not "
            f"1/{config.texts_per_unit}"
        )
    return Charge(
        MECHANISM,
        rdp=config.text_curve().times(times),
        relation=Relation.of_unit_kind(unit_kind),
        unit=f"{unit_kind} (one unit changes one member's records in {times} batch"
        f"{'es' if times > 1 else ''})",
        params={**config.parameters(), "mechanism": config.mechanism,
                "members": config.members, "max_tokens": config.max_tokens,
                "texts": config.count},
    )  # fmt: skip


def count_charge(plan: CountPlan, unit_kind: str) -> Charge:
    """``auto_count``'s Gaussian count of the units per label, as a charge (ρ-zCDP)."""
    return Charge(
        COUNT_MECHANISM, rdp=plan.curve(), relation=Relation.of_unit_kind(unit_kind),
        unit=f"{unit_kind} (one unit moves each count of its labels by one)",
        params={"sigma": plan.sigma, "sensitivity": plan.sensitivity},
    )  # fmt: skip


def statement(
    config: SynthConfig,
    labels: list[str] | None,
    unit_kind: str,
    model: str,
    seed: int | None,
    guarantee: Guarantee,
    counted: tuple[CountPlan, list[int]] | None = None,
) -> dict[str, Any]:
    """The released privacy statement: the ``guarantee`` computed from the run's charges
    (:func:`run_guarantee`), the settings, and no exact count of the data (with
    ``auto_count``: the texts per label, a function of the noisy count)."""
    total = config
    if counted is not None:
        plan, texts = counted
        config = plan.generation
        how = {"label_counts": "auto: one text per `members` units of each label, from a "
               "Gaussian count of the units (released through the texts per label)",
               "count": {"sigma": plan.sigma, "sensitivity": plan.sensitivity,
                         "epsilon_share": total.count_share, "texts_per_label": texts},
               "texts": sum(texts)}  # fmt: skip
    else:
        how = {"label_counts": "declared: the texts split evenly over the labels",
               "texts": config.count}  # fmt: skip
    times = batches_per_unit(labels, unit_kind)
    return {
        "format": STATEMENT_FORMAT,
        "guarantee": guarantee.text,
        "relation": f"one {unit_kind} added or removed changes the records of one in-context "
        f"member in {'one batch' if times == 1 else f'each of at most {times} batches (one per label)'}"
        "; the number of texts and members is fixed, so that member's next-token "
        "distribution is replaced and nothing else changes (docs/sharp_edges.md, "
        "\"DP synthetic text\")",
        "mechanism": MECHANISM_TEXT[config.mechanism],
        "epsilon": guarantee.epsilon, "delta": guarantee.delta,
        "epsilon_requested": total.epsilon, "texts_per_unit": times,
        "budget_share_per_text": f"1/{times}" if times > 1 else "whole",
        **how,
        "max_tokens": config.max_tokens, "members": config.members,
        "prompt_tokens": config.prompt_tokens, **config.parameters(),
        "labels": labels,
        "description": config.description, "model": model,
        **statement_field(total.scrub),
        "public": "the description, the labels and the settings are declared public",
        **PrivacyRandomness(seed).statement(),
    }  # fmt: skip


def _settings_digest(config: SynthConfig, labels: list[str] | None, model: str) -> str:
    settings = asdict(config)
    if settings["scrub"] == NO_SCRUB:  # as runs from before the setting existed recorded it
        del settings["scrub"]
    raw = json.dumps([settings, labels, model], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


class RunState:
    """The run's durable state (private, 0600): its id, batching key and what is written."""

    def __init__(self, folder: Path, data: dict[str, Any]) -> None:
        self.folder, self.data = folder, data

    @classmethod
    def open(cls, folder: Path, digest: str, seed: int | None, resume: bool) -> RunState:
        path = folder / "state.json"
        refuse_a_started_run(folder, resume)
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("settings") != digest:
                raise PrivlmError(
                    "the run to resume was started with other settings, data labels or model; "
                    "resume it with the same ones"
                )
            return cls(folder, data)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = (
            hashlib.sha256(f"synth-key:{seed}".encode()).hexdigest()[: 2 * KEY_BYTES]
            if seed is not None else secrets.token_hex(KEY_BYTES)
        )  # fmt: skip
        state = cls(folder, {
            "format": STATE_FORMAT, "run": secrets.token_hex(8), "key": key,
            "settings": digest, "written": [], "lost": [],
        })  # fmt: skip
        state.save()
        return state

    def save(self) -> None:
        path = self.folder / "state.json"
        write_json_atomically(path, self.data)
        os.chmod(path, 0o600)

    @property
    def run_id(self) -> str:
        return str(self.data["run"])

    def written(self) -> set[int]:
        return set(self.data["written"])

    def lost(self) -> set[int]:
        return set(self.data["lost"])


def _charge_run(ledger: PrivacyLedger | None, charges: list[Charge], run_id: str) -> None:
    """Check and charge the run's per-unit costs once, together (a resumed run finds them
    charged)."""
    if _run_charged(ledger, run_id):
        return
    run = BudgetedRun.start(ledger, "this synth run", *_tagged(charges, run_id))
    for charge in run.planned:  # the texts' charge first: a resume looks for it
        run.release(charge, lambda: None)


def _run_charged(ledger: PrivacyLedger | None, run_id: str) -> bool:
    """Whether ``ledger`` records this run's charge already (a resumed run)."""
    return ledger is not None and any(
        r.mechanism == MECHANISM and r.params.get("run") == run_id for r in ledger.charges()
    )


def _tagged(charges: list[Charge], run_id: str) -> list[Charge]:
    return [replace(c, params={**c.params, "run": run_id}) for c in charges]


def run_guarantee(
    ledger: PrivacyLedger | None, charges: list[Charge], run_id: str, delta: float
) -> Guarantee:
    """The run's guarantee from what it charged: the ledger's records of the run, or, with
    no ledger, its planned charges composed the same way."""
    if ledger is None:
        return guarantee_of(charges, delta)
    return recorded_guarantee(
        ledger, lambda r: r.params.get("run") == run_id and r.mechanism in RUN_MECHANISMS, delta
    )


def _draw_counts(
    state: RunState, data: Dataset, labels: list[str] | None, plan: CountPlan, seed: int | None
) -> list[int]:
    """The texts per label from the Gaussian count (after its charge), drawn once: a
    resumed run reads them back, never redraws."""
    if "counts" not in state.data:
        rng = PrivacyRandomness(None if seed is None else seed + 1)
        exact = unit_counts(data, labels)
        noisy = [
            n + float(z) for n, z in zip(exact, rng.normal(plan.sigma, len(exact)), strict=True)
        ]
        members = plan.generation.members
        state.data["counts"] = [max(0, int(x // members)) for x in noisy]
        state.save()
    return [int(x) for x in state.data["counts"]]


def _keep_lines(out: Path, n: int) -> None:
    """Truncate ``out`` to its first ``n`` lines: those the state records as written."""
    if not out.exists():
        out.touch(mode=0o644)
        return
    write_text_atomically(out, "".join(out.read_text().splitlines(keepends=True)[:n]))


def synthesize(
    model: ModelSource,
    data: Dataset,
    out: str | Path,
    config: SynthConfig | None = None,
    *,
    labels: list[str] | None = None,
    ledger: PrivacyLedger | None = None,
    resume: bool = False,
    progress: bool = True,
    state_dir: str | Path | None = None,
) -> SynthResult:
    """Write ``config.count`` DP synthetic texts of ``data`` to ``out`` (JSONL: ``text``,
    and ``label`` when ``labels`` are declared) and the statement beside it; charge
    ``ledger`` (the dataset's budget) first. ``state_dir``: the run's private folder
    (default: hidden beside ``out``). See the module docstring."""
    cfg = config or SynthConfig()
    out = Path(out)
    labels = declared_labels(data, labels)
    lm = model if isinstance(model, LoadedModel) else load_public_model(model)
    name = lm.loaded_as or lm.name
    folder = Path(state_dir) if state_dir is not None else run_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if cfg.generator == "dp-lora":
        return synthesize_dp_lora(lm, data, out, cfg, labels, ledger, resume, progress, folder)
    shared = plan_config(cfg, labels, data.unit_kind)
    plan = (
        plan_count(shared, len(labels or [None]), data.unit_kind != "record")
        if cfg.auto_count
        else None
    )
    gen = plan.generation if plan is not None else shared
    charges = [plan_charge(gen, labels, data.unit_kind)]
    if plan is not None:
        charges.append(count_charge(plan, data.unit_kind))
    if ledger is not None and not (folder / "state.json").is_file():
        BudgetedRun.start(ledger, "this synth run", *charges)  # refused: nothing written
    state = RunState.open(folder, _settings_digest(cfg, labels, name), cfg.seed, resume)
    _charge_run(ledger, charges, state.run_id)
    counts = None if plan is None else _draw_counts(state, data, labels, plan, cfg.seed)
    counted = None if plan is None or counts is None else (plan, counts)
    guarantee = run_guarantee(ledger, charges, state.run_id, cfg.delta)
    released = statement(cfg, labels, data.unit_kind, name, cfg.seed, guarantee, counted)
    write_json_atomically(statement_path(out), released)
    data = scrubbed(data, cfg.scrub)  # after the check: a refused run does no work
    batches = plan_batches(data, gen.count, gen.members, state.data["key"], labels, counts)
    written, lost = state.written(), state.lost()
    _keep_lines(out, len(written))
    generator = TextGenerator(lm, gen, folder / "texts.db")
    for batch in progress_bar(batches, desc="synthetic texts", disable=not progress):
        if batch.index in written or batch.index in lost:
            continue
        if generator.started(batch.index):  # interrupted half-way: its tokens were charged
            state.data["lost"].append(batch.index)
            state.save()
            continue
        text = generator.text(batch)
        with out.open("a") as f:
            f.write(_line(text, batch.label))
            f.flush()
            os.fsync(f.fileno())
        state.data["written"].append(batch.index)
        state.save()
    return SynthResult(
        out, released, len(state.data["written"]),
        len(state.data["lost"]), _curator(data, batches),
    )  # fmt: skip


def synthesize_dp_lora(
    lm: LoadedModel,
    data: Dataset,
    out: Path,
    cfg: SynthConfig,
    labels: list[str] | None,
    ledger: PrivacyLedger | None,
    resume: bool,
    progress: bool,
    folder: Path,
) -> SynthResult:
    """``generator="dp-lora"`` (:mod:`privlm.synth.dp_lora`): plan and check DP-SGD's
    charge, fit and charge once, then sample; a resumed run neither trains nor pays again."""
    from privlm.synth import dp_lora

    name = lm.loaded_as or lm.name
    train, dcfg, run, charge = dp_lora.plan(lm, data, labels, cfg, MECHANISM)
    if ledger is not None and not (folder / "state.json").is_file():
        BudgetedRun.start(ledger, "this synth run", charge)  # refused: nothing written
    state = RunState.open(folder, _settings_digest(cfg, labels, name), cfg.seed, resume)
    tagged = _tagged([charge], state.run_id)[0]
    if not (folder / dp_lora.ADAPTER).is_dir():
        # charged, then stopped before the adapter was saved: that one never left, so the
        # new fit is the run's one release and is not charged again
        due = None if _run_charged(ledger, state.run_id) else tagged
        if cfg.scrub != NO_SCRUB:  # the same records and units, so the same plan and charge
            train = dp_lora.training_data(scrubbed(data, cfg.scrub), labels, cfg)
        dp_lora.fit_and_save(lm, train, dcfg, run, ledger, due, folder, progress)
    guarantee = run_guarantee(ledger, [tagged], state.run_id, cfg.delta)
    released = {
        "format": STATEMENT_FORMAT, "generator": "dp-lora", "guarantee": guarantee.text,
        **dp_lora.statement_fields(run, dcfg, data.unit_kind),
        "epsilon": guarantee.epsilon, "delta": guarantee.delta,
        "epsilon_requested": cfg.epsilon, "label_counts": "declared: the texts split evenly "
        "over the labels", "texts": cfg.count, "max_tokens": cfg.max_tokens,
        "labels": labels, "description": cfg.description, "model": name,
        **statement_field(cfg.scrub),
        "public": "the description, the labels and the settings are declared public",
        **PrivacyRandomness(cfg.seed).statement(),
    }  # fmt: skip
    write_json_atomically(statement_path(out), released)
    done = int(state.data.get("sampled", 0))
    _keep_lines(out, done)

    def mark(n: int) -> None:
        state.data["sampled"] = n
        state.save()

    sampler = dp_lora.AdapterSampler(dp_lora.load_adapter(lm, folder), lm.tokenizer, cfg)
    written = dp_lora.sample_into(out, sampler, labels, cfg, done, mark, progress)
    kept = len(train.records)
    curator = {
        "units": len(data.units()), "records": len(data.records),
        "records_trained_on": kept, "records_left_out": len(data.records) - kept,
    }  # fmt: skip
    return SynthResult(out, released, written, 0, curator)


def _line(text: str, label: str | None) -> str:
    """One output row: ``text``, and ``label`` when labels are declared."""
    row = {"text": text} if label is None else {"text": text, "label": label}
    return json.dumps(row, ensure_ascii=False) + "\n"


def synthesize_baseline(
    model: ModelSource,
    out: str | Path,
    config: SynthConfig | None = None,
    *,
    labels: list[str] | None = None,
    unit_kind: str = "record",
    progress: bool = True,
) -> SynthResult:
    """The no-reference row: ``config.count`` texts from the same public contexts, settings
    and mechanism as :func:`synthesize`, with every member the public model (no record
    read, nothing charged). A DP synthetic set that does not beat it on the measure its
    user cares about has bought nothing with its ε. ``unit_kind``: the unit the DP run
    declares (``"user"`` with a user column), which sets its calibration."""
    cfg = config or SynthConfig()
    refuse_a_baseline_count(cfg)
    out = Path(out)
    lm = model if isinstance(model, LoadedModel) else load_public_model(model)
    if cfg.generator == "dp-lora":
        return _dp_lora_baseline(lm, out, cfg, labels, progress)
    gen = plan_config(cfg, labels, unit_kind)
    batches = public_batches(gen.count, gen.members, labels)
    released = {
        "format": BASELINE_FORMAT,
        "guarantee": "no private record was read: every text is the public model's, from "
        "the same contexts, settings and mechanism as the DP run (the no-reference baseline)",
        "texts": gen.count, "labels": labels, "mechanism": MECHANISM_TEXT[cfg.mechanism],
        "max_tokens": gen.max_tokens, "members": gen.members, "description": gen.description,
        "model": lm.loaded_as or lm.name, **PrivacyRandomness(cfg.seed).statement(),
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:  # its predictors' ledgers charge nothing
        generator = TextGenerator(lm, gen, Path(scratch) / "texts.db")
        rows = [
            _line(generator.text(b), b.label)
            for b in progress_bar(batches, desc="baseline texts", disable=not progress)
        ]  # fmt: skip
    write_text_atomically(out, "".join(rows))
    write_json_atomically(statement_path(out), released)
    return SynthResult(out, released, len(rows), 0)


def _dp_lora_baseline(
    lm: LoadedModel, out: Path, cfg: SynthConfig, labels: list[str] | None, progress: bool
) -> SynthResult:
    """dp-lora's no-reference row: the same contexts sampled the same way from the public
    model with no adapter (what the DP fine-tune must beat)."""
    from privlm.synth import dp_lora

    released = {
        "format": BASELINE_FORMAT, "generator": "dp-lora",
        "guarantee": "no private record was read: every text is sampled from the public model "
        "with no adapter, from the same contexts and settings as the DP run (the "
        "no-reference baseline)",
        "texts": cfg.count, "labels": labels, "mechanism": dp_lora.MECHANISM_TEXT,
        "max_tokens": cfg.max_tokens, "description": cfg.description,
        "model": lm.loaded_as or lm.name, **PrivacyRandomness(cfg.seed).statement(),
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    sampler = dp_lora.AdapterSampler(lm.model, lm.tokenizer, cfg)
    written = dp_lora.sample_into(
        out, sampler, labels, cfg, 0, lambda n: None, progress, "baseline texts"
    )
    write_json_atomically(statement_path(out), released)
    return SynthResult(out, released, written, 0)


def _curator(data: Dataset, batches: list[Batch]) -> dict[str, Any]:
    """Exact counts of the private data: for the curator only, never written beside."""
    used = sum(len(m) for b in batches for m in b.members)
    members = [len(m) for b in batches for m in b.members]
    return {
        "units": len(data.units()), "records": len(data.records),
        "records_in_batches": used, "records_left_out": len(data.records) - used,
        "empty_members": sum(n == 0 for n in members),
    }  # fmt: skip


class TextGenerator:
    """One text from one batch: its members' prompts, its own ledger, PMixED per token."""

    def __init__(self, lm: LoadedModel, config: SynthConfig, ledgers: Path) -> None:
        self.lm, self.config, self.ledgers = lm, config, ledgers
        self.rng = PrivacyRandomness(config.seed)
        tok = lm.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def _ledger_name(self, index: int) -> str:
        return f"text-{index}"

    def _ledger(self, batch: Batch, epsilon: float) -> PrivacyLedger:
        """The text's own ledger, its budget the text's share (``epsilon``: the ε its
        predictor is configured at, so a unit in several texts pays each its share)."""
        budget = Budget(epsilon, self.config.delta)
        return PrivacyLedger(self.ledgers, self._ledger_name(batch.index), budget)

    def started(self, index: int) -> bool:
        if not self.ledgers.exists():
            return False
        try:
            return PrivacyLedger(self.ledgers, self._ledger_name(index)).count() > 0
        except PrivlmError:
            return False  # no ledger of that name: never started

    def prompt(self, records: tuple[Any, ...]) -> list[int]:
        """A member's prompt: its records as examples, the first ``prompt_tokens`` tokens."""
        if not records:
            return []
        text = "".join(EXAMPLE.format(text=r.text) for r in records)
        ids: list[int] = self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[: self.config.prompt_tokens]

    def context(self, label: str | None) -> list[int]:
        """The public context every row continues: the description, the label, ``Text:``."""
        from privlm.synth.dp_lora import context_text

        head = context_text(self.config.description, label)
        ids: list[int] = self.lm.tokenizer(head, add_special_tokens=False)["input_ids"]
        return ids

    def text(self, batch: Batch) -> str:
        from privlm.predict.in_context import InContextEngine
        from privlm.predict.pmixed import PMixED

        cfg = self.config
        engine = InContextEngine(
            self.lm.model, [self.prompt(m) for m in batch.members], self.pad_id,
            width=cfg.prompt_tokens,
        )  # fmt: skip
        predictor: Any
        if cfg.mechanism == "dclip":
            from privlm.synth.dclip import DClipPredictor

            predictor = DClipPredictor(
                engine, self.lm.tokenizer, self._ledger(batch, cfg.dclip_text_epsilon), cfg.clip,
                cfg.top_k, cfg.max_tokens, cfg.token_curve, self.rng,
            )  # fmt: skip
        elif cfg.mechanism == "screened":
            from privlm.predict.screened import ScreenedPMixED

            screened = cfg.screened_config()
            ledger = self._ledger(batch, screened.epsilon)
            predictor = ScreenedPMixED(engine, self.lm.tokenizer, ledger, screened, seed=self.rng)
        else:  # the text's share of the budget: the plan's radius
            pmixed = cfg.pmixed_config()
            ledger = self._ledger(batch, pmixed.epsilon)
            predictor = PMixED(engine, self.lm.tokenizer, ledger, pmixed, seed=self.rng)
        stream = predictor.stream(self.context(batch.label), cfg.max_tokens)
        ids: list[int] = []
        try:
            for token in stream:  # each charged to the text's ledger before it is yielded
                if token.id == self.lm.tokenizer.eos_token_id:
                    break
                ids.append(token.id)
                if cfg.stop_at_newline and "\n" in self.lm.tokenizer.decode([token.id]):
                    break
        finally:
            stream.close()
        text: str = self.lm.tokenizer.decode(ids)
        return text.split("\n")[0].strip() if cfg.stop_at_newline else text.strip()
