"""Job kinds: their parameters (validated on submission) and how the worker runs them.

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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator
from sqlalchemy import Engine

from privlm.accounting import Budget, PrivacyLedger
from privlm.config import request_field
from privlm.curator import split_private_statistics
from privlm.data import Record
from privlm.errors import DataError, PrivlmError
from privlm.prompting.pate_pipeline import PromptPateConfig, check_public_inputs
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig
from privlm.service.datasets import load_records
from privlm.service.db import Dataset, Job, now
from privlm.service.strict import STRICT_BODY
from privlm.training.dpsgd import DpSgdConfig
from privlm.training.ensemble import EnsembleConfig
from privlm.training.jft import JftConfig
from privlm.training.lora_finetune import LoraTrainingConfig

if TYPE_CHECKING:
    from privlm.prompting.tasks import Task

KINDS = ("dpsgd", "jft", "ensemble", "pate", "prompt-dpsgd")
# jobs whose output is itself DP and may leave the service; an ensemble's adapters may not
RELEASABLE = ("dpsgd", "jft", "pate", "prompt-dpsgd")
# jobs that learn a prompt for a classification task, bundled or the tenant's own
TASK_KINDS = ("pate", "prompt-dpsgd")


class _Params(BaseModel):
    model_config = STRICT_BODY


class DpSgdParams(_Params):
    """Defaults, bounds and help: :class:`DpSgdConfig` (``epsilon`` is its target ε)."""

    epsilon: float = request_field(DpSgdConfig, "target_epsilon", le=100)
    epochs: int = request_field(DpSgdConfig, "epochs", le=100)
    batch_size: int = request_field(DpSgdConfig, "batch_size", le=4096)
    physical_batch_size: int = request_field(DpSgdConfig, "physical_batch_size", le=256)
    learning_rate: float = request_field(DpSgdConfig, "learning_rate")
    rank: int = request_field(DpSgdConfig, "rank", le=64)
    block_size: int = request_field(DpSgdConfig, "block_size", le=2048)
    max_grad_norm: float = request_field(DpSgdConfig, "max_grad_norm")


class JftParams(DpSgdParams):
    detector: str = request_field(JftConfig, "detector", max_length=100)
    phase1_epochs: int = request_field(JftConfig, "phase1_epochs", le=100)

    @field_validator("detector")
    @classmethod
    def _known_detector(cls, spec: str) -> str:
        from privlm.detect.registry import detector_parts

        try:
            detector_parts(spec)
        except PrivlmError as exc:
            raise ValueError(str(exc)) from None
        return spec


class EnsembleParams(_Params):
    """Defaults, bounds and help: :class:`EnsembleConfig` and :class:`LoraTrainingConfig`."""

    parts: int = request_field(EnsembleConfig, "parts", le=128)
    protocol: Literal["pmixed", "submix"] = request_field(EnsembleConfig, "protocol")
    epochs: int = request_field(LoraTrainingConfig, "epochs", le=100)
    learning_rate: float = request_field(LoraTrainingConfig, "learning_rate")
    rank: int = request_field(LoraTrainingConfig, "rank", le=64)
    block_size: int = request_field(LoraTrainingConfig, "block_size", le=2048)
    max_blocks: int | None = request_field(LoraTrainingConfig, "max_blocks")


class TaskParams(_Params):
    task: str | None = Field(None, max_length=40, description="a bundled task, e.g. sst2")
    task_spec: dict[str, Any] | None = Field(
        None,
        description="your own task: a task file's content (name, labels, template; "
        "README, 'Your own task'); the job stores it with its parameters",
    )


class PateParams(TaskParams):
    """Defaults, bounds and help: :class:`PromptPateConfig`."""

    public_dataset_id: str = Field(..., max_length=40)
    teachers: int = request_field(PromptPateConfig, "teachers", le=10000)
    threshold: float = request_field(PromptPateConfig, "threshold", le=1e6)
    sigma_threshold: float = request_field(PromptPateConfig, "sigma_threshold", le=1e6)
    sigma: float = request_field(PromptPateConfig, "sigma", le=1e6)
    teacher_votes: Literal["top1", "labels"] = request_field(PromptPateConfig, "teacher_votes")
    student_candidates: int = request_field(PromptPateConfig, "student_candidates", le=1000)
    holdout: int = request_field(PromptPateConfig, "holdout", le=100000)
    accounting: Literal["data-independent", "data-dependent"] = request_field(
        PromptPateConfig, "accounting"
    )


class PromptDpSgdParams(TaskParams):
    """Defaults, bounds and help: :class:`PromptDpSgdConfig` (``prompt_kind`` is its kind,
    ``epsilon`` its target ε)."""

    prompt_kind: Literal["soft-prompt", "prefix"] = request_field(PromptDpSgdConfig, "kind")
    epsilon: float = request_field(PromptDpSgdConfig, "target_epsilon", le=100)
    epochs: int = request_field(PromptDpSgdConfig, "epochs", le=100)
    batch_size: int = request_field(PromptDpSgdConfig, "batch_size", le=4096)
    learning_rate: float = request_field(PromptDpSgdConfig, "learning_rate", le=1)
    virtual_tokens: int = request_field(PromptDpSgdConfig, "virtual_tokens", le=256)
    unit: Literal["auto", "record", "user"] = request_field(PromptDpSgdConfig, "unit")


PARAMS: dict[str, type[_Params]] = {
    "dpsgd": DpSgdParams,
    "jft": JftParams,
    "ensemble": EnsembleParams,
    "pate": PateParams,
    "prompt-dpsgd": PromptDpSgdParams,
}


def validate_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """The full parameter set (defaults filled in), or a PrivlmError naming the problem."""
    if kind not in PARAMS:
        raise PrivlmError(f"unknown job kind {kind!r}; choose one of {', '.join(KINDS)}")
    try:
        full = PARAMS[kind](**params).model_dump()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in exc.errors()
        )
        raise PrivlmError(f"invalid {kind} parameters: {problems}") from None
    if kind in TASK_KINDS:
        job_task(full)  # a bad task spec is refused now, naming its field
    return full


def job_task(params: dict[str, Any]) -> Task:
    """A task job's task: bundled (``task``) or the tenant's own (``task_spec``). Datasets in
    the service name their text, label and user columns ``text``, ``label``, ``user_id``."""
    from privlm.prompting.tasks import DEFAULT_COLUMNS, get_task, task_from_spec

    if (params.get("task") is None) == (params.get("task_spec") is None):
        raise PrivlmError("give params.task (a bundled task) or params.task_spec, not both")
    if params.get("task") is not None:
        return get_task(params["task"])
    task = task_from_spec(params["task_spec"], "params.task_spec")
    renamed = [k for k, v in DEFAULT_COLUMNS.items() if task.columns[k] != v]
    if renamed:
        raise PrivlmError(
            f"params.task_spec: field 'columns' renames {', '.join(renamed)}; datasets in the "
            "service name them text, label and user_id (rename the columns before upload)"
        )
    if task.corpus is not None:
        raise PrivlmError(
            "params.task_spec: field 'corpus': a job learns from the tenant's datasets, not a "
            "bundled corpus"
        )
    return task


def check_task_data(params: dict[str, Any], private: Dataset, public: Dataset | None) -> None:
    """At submission: the datasets fit the job's task (labels, template fields), and
    PromptPATE's public inputs are public by declaration and share no private record (they
    leave verbatim in the student prompt)."""
    task = job_task(params)
    secret = task_records(private, task, "private")
    if public is not None:
        if public.kind != "public" or public.id == private.id:
            raise PrivlmError(
                f"dataset {public.id} is private (budgeted): PromptPATE releases its public "
                "inputs verbatim in the student prompt, so they must come from a dataset "
                "uploaded as public (public=true, no budget)"
            )
        check_public_inputs(secret, task_records(public, task, "public"))


def task_records(ds: Dataset, task: Task, role: str) -> list[Record]:
    """The dataset's records as ``role`` data of ``task``; errors name the dataset, the line
    and the field, never the content."""
    from privlm.prompting.task_data import load_task_records

    try:
        return load_task_records(ds.path, task, role).records
    except DataError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        raise PrivlmError(f"dataset {ds.id} ({role} data): {where}{exc.problem}") from None


def dataset_ledger(url: str | Engine, ds: Dataset) -> PrivacyLedger:
    """The dataset's one budget: every DP job and every deployment of its ensembles."""
    return PrivacyLedger(url, f"dataset-{ds.id}", Budget(ds.budget_epsilon, ds.budget_delta))


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


def _dpsgd_config(p: dict[str, Any], delta: float) -> Any:
    from privlm.training.dpsgd import DpSgdConfig

    return DpSgdConfig(
        target_epsilon=p["epsilon"], delta=delta, epochs=p["epochs"], batch_size=p["batch_size"],
        physical_batch_size=p["physical_batch_size"], learning_rate=p["learning_rate"],
        rank=p["rank"], block_size=p["block_size"], max_grad_norm=p["max_grad_norm"],
    )  # fmt: skip


def labelled(statement: dict[str, Any]) -> dict[str, Any]:
    """A job's result: the statement as its artefact releases it, and the exact statistics
    of the data apart, under ``not_private_for_the_curator`` (the tenant's eyes only)."""
    released, taken = split_private_statistics(statement)
    return {"statement": released, "not_private_for_the_curator": taken}


def run_dpsgd(ctx: JobContext) -> dict[str, Any]:
    from privlm.training.dpsgd import train_dpsgd

    p = json.loads(ctx.job.params)
    ledger = job_ledger(ctx)
    st = train_dpsgd(
        ctx.model, load_records(ctx.dataset), ctx.out_dir,
        _dpsgd_config(p, ctx.dataset.budget_delta), progress=True, ledger=ledger,
    )  # fmt: skip
    return {**labelled(st.to_dict()), "epsilon_spent": job_epsilon(ledger, ctx.job.id)}


def run_jft(ctx: JobContext) -> dict[str, Any]:
    from privlm.training.jft import JftConfig, train_jft
    from privlm.training.lora_finetune import LoraTrainingConfig

    p = json.loads(ctx.job.params)
    ledger = job_ledger(ctx)
    cfg = JftConfig(
        detector=p["detector"],
        phase1_training=LoraTrainingConfig(
            epochs=p["phase1_epochs"], pack=False, block_size=p["block_size"], rank=p["rank"]
        ),
        phase2=_dpsgd_config(p, ctx.dataset.budget_delta),
    )
    st = train_jft(ctx.model, load_records(ctx.dataset), ctx.out_dir, cfg, ledger=ledger)
    return {**labelled(st.to_dict()), "epsilon_spent": job_epsilon(ledger, ctx.job.id)}


def run_ensemble(ctx: JobContext) -> dict[str, Any]:
    """Trains (or, after an interruption, resumes) one LoRA adapter per disjoint part."""
    from privlm.training.ensemble import train_ensemble
    from privlm.training.lora_finetune import LoraTrainingConfig

    p = json.loads(ctx.job.params)
    cfg = LoraTrainingConfig(
        rank=p["rank"], epochs=p["epochs"], learning_rate=p["learning_rate"],
        block_size=p["block_size"], max_blocks=p["max_blocks"],
    )  # fmt: skip
    manifest = train_ensemble(
        ctx.model, load_records(ctx.dataset), p["parts"], ctx.out_dir, p["protocol"], cfg
    )
    return {"protocol": manifest["protocol"], "adapters": len(manifest["partition"])}


def run_pate(ctx: JobContext) -> dict[str, Any]:
    from privlm.models import load_public_model
    from privlm.prompting.pate_pipeline import PromptPateConfig, run_prompt_pate

    p = json.loads(ctx.job.params)
    if ctx.public_dataset is None:
        raise PrivlmError("PromptPATE needs a public dataset (public_dataset_id)")
    task = job_task(p)
    private = task_records(ctx.dataset, task, "private")
    public = task_records(ctx.public_dataset, task, "public")
    ledger = job_ledger(ctx)
    cfg = PromptPateConfig(
        teachers=p["teachers"], threshold=p["threshold"], sigma_threshold=p["sigma_threshold"],
        sigma=p["sigma"], epsilon=ctx.dataset.budget_epsilon, delta=ctx.dataset.budget_delta,
        student_candidates=p["student_candidates"], holdout=p["holdout"],
        teacher_votes=p["teacher_votes"], accounting=p.get("accounting", "data-independent"),
    )  # fmt: skip
    res = run_prompt_pate(
        load_public_model(ctx.model), task, private, public,  # the serve --device policy
        ctx.out_dir, ledger, cfg,
    )  # fmt: skip
    out = res.to_dict()
    out.pop("student", None)  # the student prompt is the artefact in out_dir
    return {**out, "task": task.name, "epsilon_spent": job_epsilon(ledger, ctx.job.id)}


def run_prompt_dpsgd(ctx: JobContext) -> dict[str, Any]:
    """PromptDPSGD on the dataset: the soft prompt or prefix is the artefact."""
    from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, train_prompt_dpsgd

    p = json.loads(ctx.job.params)
    task = job_task(p)
    ledger = job_ledger(ctx)
    cfg = PromptDpSgdConfig(
        kind=p["prompt_kind"], virtual_tokens=p["virtual_tokens"], target_epsilon=p["epsilon"],
        delta=ctx.dataset.budget_delta, epochs=p["epochs"], batch_size=p["batch_size"],
        learning_rate=p["learning_rate"], unit=p["unit"],
    )  # fmt: skip
    st = train_prompt_dpsgd(
        ctx.model, task, task_records(ctx.dataset, task, "private"), ctx.out_dir, cfg,
        ledger=ledger,
    )  # fmt: skip
    return {
        **labelled(st.to_dict()), "task": task.name,
        "epsilon_spent": job_epsilon(ledger, ctx.job.id),
    }  # fmt: skip


RUNNERS: dict[str, Runner] = {
    "dpsgd": run_dpsgd,
    "jft": run_jft,
    "ensemble": run_ensemble,
    "pate": run_pate,
    "prompt-dpsgd": run_prompt_dpsgd,
}


TEXT_SUFFIXES = (".json", ".md", ".txt", ".yaml", ".yml")


def server_roots(data_dir: Path) -> list[str]:
    """Server directories an artefact must not reveal: the data directory, the model cache
    and the home directory (longest first, so the most specific is replaced)."""
    from privlm.settings import cache_dir

    roots = {str(data_dir.resolve()), str(data_dir), str(cache_dir()), str(Path.home())}
    return sorted((r for r in roots if len(r) > 1), key=len, reverse=True)


def scrub(text: str, roots: list[str]) -> str:
    """``text`` with every server directory replaced by ``<server>``.

    >>> scrub("base_model: /srv/privlm/cache/models/tiny", ["/srv/privlm/cache", "/srv"])
    'base_model: <server>/models/tiny'
    """
    for root in roots:
        text = text.replace(root, "<server>")
    return text


def zip_artifact(out_dir: Path, model: str, data_dir: Path) -> bytes:
    """The output directory as a zip (adapter or student prompt, and privacy statement),
    revealing no server path: PEFT writes the base model's local directory
    into ``adapter_config.json`` and its model card; they name ``model`` instead."""
    import io
    import zipfile

    roots = server_roots(data_dir)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(out_dir.rglob("*")):
            if not f.is_file():
                continue
            name = f.relative_to(out_dir).as_posix()
            if f.name == "adapter_config.json":
                config = json.loads(f.read_text())
                config["base_model_name_or_path"] = model
                z.writestr(name, scrub(json.dumps(config, indent=2), roots))
            elif f.suffix in TEXT_SUFFIXES:
                z.writestr(name, scrub(f.read_text(errors="replace"), roots))
            else:
                z.write(f, name)
    return buf.getvalue()


def guarantee(job: Job) -> dict[str, Any]:
    """What a job's output guarantees, in the words the page, the API and the model card use:
    a JFT model is selective DP under its policy, never plain DP."""
    if job.kind == "jft":
        policy = json.loads(job.params).get("detector")
        return {
            "kind": "SDP",
            "policy": policy,
            "dp_epsilon": None,
            "text": f"(ε, δ)-SDP under the policy '{policy}' (JFT direct mode): what the policy "
            "flags is protected; phase 1 trained without noise on the rest, so there is no "
            "ordinary DP guarantee",
        }
    if job.kind == "ensemble":
        return {
            "kind": "none released",
            "text": "the adapters never leave the service; a deployment's tokens are DP, "
            "and reserved on the dataset's budget",
        }
    return {"kind": "DP", "text": "(ε, δ)-DP per privacy unit"}


def check_dataset_policy(kind: str, ds: Dataset) -> None:
    """Refuse a job whose output the dataset's owner said must not be released, and a
    private job on a public dataset (it has no budget to charge)."""
    if ds.kind == "public":
        raise PrivlmError(
            f"dataset {ds.id} was uploaded as public (no budget): a {kind} job trains on a "
            "private dataset; name this one as PromptPATE's public_dataset_id instead"
        )
    if kind == "jft" and ds.require_dp:
        raise PrivlmError(
            f"dataset {ds.id} requires DP-only artefacts; a JFT job (direct mode) gives "
            "selective DP only, since its phase 1 trains without noise. Use a dpsgd job."
        )


def progress(job: Job) -> dict[str, Any]:
    """Steps done of total, time elapsed, and (while running) an estimate of the time left
    from the pace so far."""
    elapsed = None
    if job.started_at is not None:
        elapsed = ((job.finished_at or now()) - job.started_at).total_seconds()
    eta = None
    if job.status == "running" and elapsed is not None and 0 < job.percent < 100:
        eta = elapsed * (100.0 - job.percent) / job.percent
    return {
        "percent": round(job.percent, 2), "stage": job.stage,
        "steps_done": job.steps_done, "steps_total": job.steps_total,
        "elapsed_s": None if elapsed is None else round(elapsed, 1),
        "eta_s": None if eta is None else round(eta, 1),
    }  # fmt: skip


def public_params(job: Job) -> dict[str, Any]:
    """A job's parameters as its owner sees them: a model given as a server directory is
    shown by its name only."""
    params: dict[str, Any] = json.loads(job.params)
    model = params.get("model")
    if isinstance(model, str) and Path(model).is_absolute():
        params["model"] = Path(model).name
    return params


def describe(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "dataset_id": job.dataset_id,
        "params": public_params(job),
        "status": job.status,
        "stage": job.stage,
        "progress": progress(job),
        "cancel_requested": bool(job.cancel_requested),
        "epsilon": {
            "planned": job.epsilon_planned,
            "spent": job.epsilon_spent,
            "spent_means": "what this job charged to its dataset's budget (the dataset's "
            "running total is shown on the dataset)",
        },
        "guarantee": guarantee(job),
        "error": job.error,
        "attempts": job.attempts,
        "events": json.loads(job.events),
        "created_at": job.created_at.isoformat() + "Z",
        "started_at": None if job.started_at is None else job.started_at.isoformat() + "Z",
        "finished_at": None if job.finished_at is None else job.finished_at.isoformat() + "Z",
    }
