"""How the worker runs each job kind: a runner gets a :class:`JobContext`, reads its job's
parameters as the typed config of its kind (:mod:`privlm.service.job_params`), and calls the
library's entry point with the dataset's ledger.

Every DP job charges its dataset's ledger (``dataset-<id>``, budget set at upload) before
it writes its artefact, as the library does; a job whose cost would not fit is refused
before training. An ensemble job releases nothing private by itself: its deployments carry
the per-token cost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine

from privlm.accounting import Budget, PrivacyLedger
from privlm.curator import Schema, split_statement
from privlm.errors import PrivlmError
from privlm.service.datasets import load_records
from privlm.service.db import Dataset, Job, now
from privlm.service.job_params import (
    DpSgdParams,
    EnsembleParams,
    JftParams,
    JobParams,
    PateParams,
    PromptDpSgdParams,
    SynthParams,
    job_task,
    task_records,
)

P = TypeVar("P", bound=JobParams)


def dataset_ledger(url: str | Engine, ds: Dataset) -> PrivacyLedger:
    """The dataset's one budget, shared with every dataset of its records: every DP job and
    every deployment of its ensembles (privlm.service.record_index)."""
    return PrivacyLedger(url, ds.ledger_name, Budget(ds.budget_epsilon, ds.budget_delta))


def job_ledger(ctx: JobContext) -> PrivacyLedger:
    """The dataset's ledger, tagging each charge with the job that made it."""
    return dataset_ledger(ctx.ledger_url, ctx.dataset).tagged(job=ctx.job.id)


def job_epsilon(ledger: PrivacyLedger, job_id: str) -> float:
    """What one job charged to its dataset's budget (ε at the budget's δ): its own charges
    composed, not the dataset's running total."""
    own = ledger.spent_by(lambda r: r.params.get("job") == job_id and "deployment" not in r.params)
    return own.epsilon


def add_event(job: Job, what: str) -> None:
    events = json.loads(job.events or "[]")
    events.append({"at": now().isoformat() + "Z", "what": what})
    job.events = json.dumps(events[-50:])


class JobCancelled(Exception):
    """The job's owner cancelled it: it stops at its next step and writes no artefact."""


@dataclass
class JobContext:
    """What a runner gets: the job, its dataset(s), where to write, and the database."""

    job: Job
    dataset: Dataset
    public_dataset: Dataset | None
    out_dir: Path
    ledger_url: str  # the privacy ledgers' database
    model: str


Runner = Callable[[JobContext], dict[str, Any]]


def typed(ctx: JobContext, kind: type[P]) -> P:
    """The job's parameters as its kind's typed parameters."""
    from privlm.service.job_kinds import stored_params

    params = stored_params(ctx.job).params
    if not isinstance(params, kind):
        raise PrivlmError(f"job {ctx.job.id} is a {ctx.job.kind} job, not {kind.__name__}")
    return params


def labelled(statement: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """A job's result: the statement as its artefact releases it, and the exact statistics
    of the data apart, under ``not_private_for_the_curator`` (the tenant's eyes only)."""
    split = split_statement(statement, schema)
    return {"statement": split.released, "not_private_for_the_curator": split.curator}


def run_dpsgd(ctx: JobContext) -> dict[str, Any]:
    from privlm.training.dpsgd import RUN_RELEASES, train_dpsgd

    params = typed(ctx, DpSgdParams)
    ledger = job_ledger(ctx)
    st = train_dpsgd(
        ctx.model, load_records(ctx.dataset), ctx.out_dir,
        params.config(ctx.dataset.budget_delta), ledger=ledger,
    )  # fmt: skip
    return {
        **labelled(st.to_dict(), RUN_RELEASES),
        "epsilon_spent": job_epsilon(ledger, ctx.job.id),
    }


def run_jft(ctx: JobContext) -> dict[str, Any]:
    from privlm.training.jft import RELEASES as JFT_RELEASES
    from privlm.training.jft import train_jft

    params = typed(ctx, JftParams)
    ledger = job_ledger(ctx)
    cfg = params.config(ctx.dataset.budget_delta)
    st = train_jft(ctx.model, load_records(ctx.dataset), ctx.out_dir, cfg, ledger=ledger)
    return {
        **labelled(st.to_dict(), JFT_RELEASES),
        "epsilon_spent": job_epsilon(ledger, ctx.job.id),
    }


def run_ensemble(ctx: JobContext) -> dict[str, Any]:
    """Trains (or, after an interruption, resumes) one LoRA adapter per disjoint part."""
    from privlm.training.ensemble import train_ensemble

    cfg = typed(ctx, EnsembleParams).config()
    manifest = train_ensemble(ctx.model, load_records(ctx.dataset), ctx.out_dir, cfg)
    return {"protocol": manifest.protocol, "adapters": manifest.members}


def run_pate(ctx: JobContext) -> dict[str, Any]:
    from privlm.models import load_public_model
    from privlm.prompting.pate_pipeline import PateExamples, run_prompt_pate

    params = typed(ctx, PateParams)
    if ctx.public_dataset is None:
        raise PrivlmError("PromptPATE needs a public dataset (public_dataset_id)")
    task = job_task(params)
    private = task_records(ctx.dataset, task, "private")
    public = task_records(ctx.public_dataset, task, "public")
    ledger = job_ledger(ctx)
    cfg = params.config(ctx.dataset.budget_epsilon, ctx.dataset.budget_delta)
    res = run_prompt_pate(
        load_public_model(ctx.model),  # the serve --device policy
        PateExamples(task, private, public), ctx.out_dir, cfg, ledger=ledger,
    )  # fmt: skip
    out = res.to_dict()
    out.pop("student", None)  # the student prompt is the artefact in out_dir
    return {**out, "task": task.name, "epsilon_spent": job_epsilon(ledger, ctx.job.id)}


def run_prompt_dpsgd(ctx: JobContext) -> dict[str, Any]:
    """PromptDPSGD on the dataset: the soft prompt or prefix is the artefact."""
    from privlm.prompting.prompt_dpsgd import RELEASES as PROMPT_RELEASES
    from privlm.prompting.prompt_dpsgd import TaskExamples, train_prompt_dpsgd

    params = typed(ctx, PromptDpSgdParams)
    task = job_task(params)
    ledger = job_ledger(ctx)
    examples = TaskExamples(task, task_records(ctx.dataset, task, "private"))
    cfg = params.config(ctx.dataset.budget_delta)
    st = train_prompt_dpsgd(ctx.model, examples, ctx.out_dir, cfg, ledger=ledger)
    return {
        **labelled(st.to_dict(), PROMPT_RELEASES), "task": task.name,
        "epsilon_spent": job_epsilon(ledger, ctx.job.id),
    }  # fmt: skip


SYNTH_FILE = "synth.jsonl"


def synth_state_dir(out_dir: Path) -> Path:
    """A synth job's private run folder: beside its output folder, never inside it (the
    output folder is what the artefact zip and a saved public dataset release)."""
    return out_dir.with_name(out_dir.name + ".synth-state")


def run_synth(ctx: JobContext) -> dict[str, Any]:
    """DP synthetic texts of the dataset; an interrupted job resumes from its written texts,
    without a second charge (privlm.synth)."""
    from privlm.synth import synthesize
    from privlm.synth.report import report_of_output, shortened

    params = typed(ctx, SynthParams)
    ledger = job_ledger(ctx)
    records = load_records(ctx.dataset)
    res = synthesize(
        ctx.model, records, ctx.out_dir / SYNTH_FILE,
        params.config(ctx.dataset.budget_delta), labels=params.labels, ledger=ledger,
        resume=True, progress=False, state_dir=synth_state_dir(ctx.out_dir),
    )  # fmt: skip
    # the overlap report is computed on the records: the tenant's eyes only, in the job's
    # curator part, never in its folder (the zip and a saved dataset release the folder)
    overlap = shortened(report_of_output(ctx.out_dir / SYNTH_FILE, records.records, "regex"))
    return {
        "statement": res.statement, "texts": res.written, "lost": res.lost,
        "not_private_for_the_curator": {**res.curator, "overlap": overlap},
        "epsilon_spent": job_epsilon(ledger, ctx.job.id),
    }  # fmt: skip
