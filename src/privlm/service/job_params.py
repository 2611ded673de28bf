"""Job kinds' parameters: validated on submission, stored with the job, and turned into the
library's typed config classes (``DpSgdConfig``, ``JftConfig``, ``EnsembleConfig``,
``PromptPateConfig``, ``PromptDpSgdConfig``) in one place each (:meth:`config`). Each
field takes its default, bounds and help from the config class (``privlm.config``); the
service may only tighten a bound. Runners receive the typed config, never a dict.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from privlm.config import request_field, settings_of
from privlm.data import Record
from privlm.errors import DataError, PrivlmError
from privlm.prompting.config import PromptDpSgdConfig, PromptPateConfig
from privlm.service.db import Dataset
from privlm.service.strict import STRICT_BODY
from privlm.synth.config import SynthConfig
from privlm.synth.scrub import NO_SCRUB
from privlm.training.config import DpSgdConfig, EnsembleConfig, JftConfig, LoraTrainingConfig

if TYPE_CHECKING:
    from privlm.prompting.tasks import Task


class JobParams(BaseModel):
    """A job kind's parameters. Each field is a setting of a config class, declared with
    ``request_field`` (its default, bounds and help come from there). ``RENAMED`` maps a
    request field to the setting it sets where the names differ (the request's ``epsilon``
    is DP-SGD's target ε). ``WITHHELD`` names each setting of the kind's config classes that
    a tenant may not set, with the reason: a test checks that every setting is one or the
    other, so a new setting is a decision, never an oversight."""

    model_config = STRICT_BODY
    RENAMED: ClassVar[dict[str, str]] = {}
    WITHHELD: ClassVar[dict[str, str]] = {}

    def settings(self, cls: type) -> dict[str, Any]:
        """Every request field that is a setting of ``cls``, under the setting's name: what
        the config is built from, with no mapping to keep by hand."""
        names = settings_of(cls)
        out = {}
        for field in type(self).model_fields:
            name = self.RENAMED.get(field, field)
            if name in names:
                out[name] = getattr(self, field)
        return out

    @property
    def planned_epsilon(self) -> float | None:
        """The ε a DP job will charge its dataset (checked against what is left on
        submission); None for a job whose cost is not one target ε."""
        return None


# what a tenant never sets: the dataset's δ and the server's placement are the service's
SERVICE_OWNED = {
    "delta": "the dataset's δ, set at upload",
    "seed": "the service never seeds noise: a seed voids the guarantee",
    "device": "the server's placement (privlm serve --device)",
    "dtype": "the server's placement (privlm serve --dtype)",
}
DPSGD_WITHHELD = {
    **SERVICE_OWNED,
    "noise": "a job is planned by its target ε (σ calibrated), checked against the budget left",
    "noise_multiplier": "a job is planned by its target ε, checked against the budget left",
    "secure_mode": "not offered by the service yet",
    "accountant": "the service reports RDP",
    "alpha": "LoRA α stays at its default (Table 2)",
    "grad_sample_mode": "a server memory setting, not offered yet",
    "user_sampling": "the service's datasets train per record unless they carry users",
    "max_blocks_per_user": "not offered by the service yet",
    "user_reduction": "not offered by the service yet",
    "gradient_checkpointing": "a server memory setting, not offered yet",
}


class DpSgdParams(JobParams):
    """Defaults, bounds and help: :class:`DpSgdConfig` (``epsilon`` is its target ε)."""

    RENAMED: ClassVar[dict[str, str]] = {"epsilon": "target_epsilon"}
    WITHHELD: ClassVar[dict[str, str]] = DPSGD_WITHHELD
    epsilon: float = request_field(DpSgdConfig, "target_epsilon", le=100)
    epochs: int = request_field(DpSgdConfig, "epochs", le=100)
    batch_size: int = request_field(DpSgdConfig, "batch_size", le=4096)
    physical_batch_size: int = request_field(DpSgdConfig, "physical_batch_size", le=256)
    learning_rate: float = request_field(DpSgdConfig, "learning_rate")
    rank: int = request_field(DpSgdConfig, "rank", le=64)
    block_size: int = request_field(DpSgdConfig, "block_size", le=2048)
    max_grad_norm: float = request_field(DpSgdConfig, "max_grad_norm")

    def config(self, delta: float) -> DpSgdConfig:
        """DP-SGD at the dataset's δ."""
        return DpSgdConfig(**self.settings(DpSgdConfig), delta=delta)

    @property
    def planned_epsilon(self) -> float | None:
        return self.epsilon


def known_detector(spec: str) -> str:
    """``spec`` if it names known detectors, else a validation error naming the first
    unknown one (checked at submission; builds nothing)."""
    from privlm.detect.registry import detector_parts

    try:
        detector_parts(spec)
    except PrivlmError as exc:
        raise ValueError(str(exc)) from None
    return spec


class JftParams(DpSgdParams):
    """Phase 2 is :class:`DpSgdParams`; phase 1 and the detector: :class:`JftConfig`."""

    WITHHELD: ClassVar[dict[str, str]] = {
        **DPSGD_WITHHELD,
        "phase1": "the service runs JFT's direct mode (no screened or annotated files)",
        "phase1_epsilon": "light noise only, which the service does not run",
    }
    detector: str = request_field(JftConfig, "detector", max_length=100)
    phase1_epochs: int = request_field(JftConfig, "phase1_epochs", le=100)
    phase1_learning_rate: float = request_field(JftConfig, "phase1_learning_rate")

    @field_validator("detector")
    @classmethod
    def _known_detector(cls, spec: str) -> str:
        return known_detector(spec)

    def config(self, delta: float) -> JftConfig:  # type: ignore[override]  # JFT's own
        """JFT direct mode; phase 1's settings come from ``JftConfig.phase1_lora``."""
        return JftConfig(**self.settings(JftConfig), phase2=DpSgdParams.config(self, delta))


LORA_MAX_PARTS, IN_CONTEXT_MAX_PARTS = 128, 4096


class EnsembleParams(JobParams):
    """Defaults, bounds and help: :class:`EnsembleConfig` and :class:`LoraTrainingConfig`."""

    WITHHELD: ClassVar[dict[str, str]] = {
        "alpha": "LoRA α stays at its default (Table 2)",
        "batch_size": "a server memory setting, not offered yet",
    }
    parts: int = request_field(EnsembleConfig, "parts", ge=2, le=IN_CONTEXT_MAX_PARTS)
    protocol: Literal["pmixed", "submix"] = request_field(EnsembleConfig, "protocol")
    members: Literal["lora", "in-context"] = request_field(EnsembleConfig, "members")
    prompt_tokens: int = request_field(EnsembleConfig, "prompt_tokens", le=2048)
    epochs: int = request_field(LoraTrainingConfig, "epochs", le=100)
    learning_rate: float = request_field(LoraTrainingConfig, "learning_rate")
    rank: int = request_field(LoraTrainingConfig, "rank", le=64)
    block_size: int = request_field(LoraTrainingConfig, "block_size", le=2048)
    max_blocks: int | None = request_field(LoraTrainingConfig, "max_blocks")

    @model_validator(mode="after")
    def _lora_parts(self) -> EnsembleParams:
        if self.members == "lora" and self.parts > LORA_MAX_PARTS:
            raise ValueError(
                f"a LoRA ensemble trains one adapter per member: at most {LORA_MAX_PARTS} parts "
                f"here; in-context members (no training) allow up to {IN_CONTEXT_MAX_PARTS}"
            )
        return self

    def config(self) -> EnsembleConfig:
        training = LoraTrainingConfig(**self.settings(LoraTrainingConfig))
        return EnsembleConfig(**self.settings(EnsembleConfig), training=training)


class TaskParams(JobParams):
    task: str | None = Field(None, max_length=40, description="a bundled task, e.g. sst2")
    task_spec: dict[str, Any] | None = Field(
        None,
        description="your own task: a task file's content (name, labels, template; "
        "README, 'Your own task'); the job stores it with its parameters",
    )


class PateParams(TaskParams):
    """Defaults, bounds and help: :class:`PromptPateConfig`."""

    WITHHELD: ClassVar[dict[str, str]] = {
        "epsilon": "the dataset's budget ε",
        "delta": "the dataset's δ, set at upload",
        "shots": "one shot per teacher (Flocks §4)",
        "queries": "every public input of the public dataset is labelled",
        "seed": "the service never seeds noise: a seed voids the guarantee",
        "partition_key": "a fresh key per job, recorded in its privacy statement",
        "batch_size": "a server memory setting, not offered yet",
    }
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

    def config(self, epsilon: float, delta: float) -> PromptPateConfig:
        """PromptPATE under the dataset's budget (ε, δ)."""
        return PromptPateConfig(**self.settings(PromptPateConfig), epsilon=epsilon, delta=delta)


class PromptDpSgdParams(TaskParams):
    """Defaults, bounds and help: :class:`PromptDpSgdConfig` (``prompt_kind`` is its kind,
    ``epsilon`` its target ε)."""

    RENAMED: ClassVar[dict[str, str]] = {"prompt_kind": "kind", "epsilon": "target_epsilon"}
    WITHHELD: ClassVar[dict[str, str]] = {
        **SERVICE_OWNED,
        "noise": "the service trains privately, σ calibrated to the target ε",
        "noise_multiplier": "the service calibrates σ to the target ε",
        "secure_mode": "not offered by the service yet",
        "accountant": "the service reports RDP",
        "max_grad_norm": "stays at its default",
        "physical_batch_size": "a server memory setting, not offered yet",
    }
    prompt_kind: Literal["soft-prompt", "prefix"] = request_field(PromptDpSgdConfig, "kind")
    epsilon: float = request_field(PromptDpSgdConfig, "target_epsilon", le=100)
    epochs: int = request_field(PromptDpSgdConfig, "epochs", le=100)
    batch_size: int = request_field(PromptDpSgdConfig, "batch_size", le=4096)
    learning_rate: float = request_field(PromptDpSgdConfig, "learning_rate", le=1)
    virtual_tokens: int = request_field(PromptDpSgdConfig, "virtual_tokens", le=256)
    unit: Literal["auto", "record", "user"] = request_field(PromptDpSgdConfig, "unit")

    def config(self, delta: float) -> PromptDpSgdConfig:
        return PromptDpSgdConfig(**self.settings(PromptDpSgdConfig), delta=delta)

    @property
    def planned_epsilon(self) -> float | None:
        return self.epsilon


class SynthParams(JobParams):
    """Defaults, bounds and help: :class:`SynthConfig` (``privlm synth``)."""

    WITHHELD: ClassVar[dict[str, str]] = {
        "delta": "the dataset's δ, set at upload",
        "seed": "the service never seeds noise: a seed voids the guarantee",
    }
    epsilon: float = request_field(SynthConfig, "epsilon", le=100)
    generator: Literal["in-context", "dp-lora"] = request_field(SynthConfig, "generator")
    mechanism: Literal["pmixed", "dclip", "screened"] = request_field(SynthConfig, "mechanism")
    train_epochs: int = request_field(SynthConfig, "train_epochs", le=20)
    train_batch_size: int = request_field(SynthConfig, "train_batch_size", le=4096)
    learning_rate: float = request_field(SynthConfig, "learning_rate")
    lora_rank: int = request_field(SynthConfig, "lora_rank", le=64)
    paid_tokens: int | None = request_field(SynthConfig, "paid_tokens", le=1024)
    threshold: float = request_field(SynthConfig, "threshold")
    top_k: int = request_field(SynthConfig, "top_k", le=100_000)
    count: int = request_field(SynthConfig, "count", le=100_000)
    auto_count: bool = request_field(SynthConfig, "auto_count")
    count_share: float = request_field(SynthConfig, "count_share")
    max_tokens: int = request_field(SynthConfig, "max_tokens", le=1024)
    members: int = request_field(SynthConfig, "members", le=1024)
    prompt_tokens: int = request_field(SynthConfig, "prompt_tokens", le=2048)
    alpha: int | None = request_field(SynthConfig, "alpha", le=64)
    description: str = request_field(SynthConfig, "description", max_length=2000)
    stop_at_newline: bool = request_field(SynthConfig, "stop_at_newline")
    scrub: str = request_field(SynthConfig, "scrub", max_length=100)
    labels: list[str] | None = Field(
        None, max_length=1000,
        description="The label set, declared public: texts are generated per label (the "
        "count split evenly); required when the dataset has labels",
    )  # fmt: skip

    @field_validator("scrub")
    @classmethod
    def _known_scrub(cls, spec: str) -> str:
        return spec if spec == NO_SCRUB else known_detector(spec)

    def config(self, delta: float) -> SynthConfig:
        return SynthConfig(**self.settings(SynthConfig), delta=delta)

    @property
    def planned_epsilon(self) -> float | None:
        return self.epsilon  # a user in several labels' batches pays more: the run checks


def job_task(params: TaskParams) -> Task:
    """A task job's task: bundled (``task``) or the tenant's own (``task_spec``). Datasets in
    the service name their text, label and user columns ``text``, ``label``, ``user_id``."""
    from privlm.prompting.tasks import DEFAULT_COLUMNS, get_task, task_from_spec

    if (params.task is None) == (params.task_spec is None):
        raise PrivlmError("give params.task (a bundled task) or params.task_spec, not both")
    if params.task is not None:
        return get_task(params.task)
    assert params.task_spec is not None
    task = task_from_spec(params.task_spec, "params.task_spec")
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


def check_task_data(
    params: TaskParams, private: Dataset, public: Dataset | None, model: str
) -> list[Record] | None:
    """At submission: the task's verbalisers can be told apart under ``model``'s tokenizer,
    the datasets fit the job's task (labels, template fields), and PromptPATE's public
    inputs are public by declaration and share no record of the job's private dataset
    (they leave verbatim in the student prompt). Returns the public inputs, for the check
    against every private record of the tenant (``privlm.service.record_index``)."""
    from privlm.prompting.pate_pipeline import check_public_inputs
    from privlm.prompting.tasks import label_token_ids

    task = job_task(params)
    try:
        label_token_ids(task, tokenizer_of(model))
    except DataError as exc:
        raise PrivlmError(f"params.task: {exc.problem}") from None
    secret = task_records(private, task, "private")
    if public is not None:
        if public.kind != "public" or public.id == private.id:
            raise PrivlmError(
                f"dataset {public.id} is private (budgeted): PromptPATE releases its public "
                "inputs verbatim in the student prompt, so they must come from a dataset "
                "uploaded as public (public=true, no budget)"
            )
        inputs = task_records(public, task, "public")
        check_public_inputs(secret, inputs)
        return inputs
    return None


def check_pate_plan(params: PateParams, ledger: Any, private: Dataset, queries: int) -> None:
    """At submission: refuse a PromptPATE job whose dataset's budget cannot label every
    public input at its data-independent worst case (it would spend and release nothing
    useful), naming how many inputs it could label. The unit is the run's
    (:func:`privlm.prompting.pate_pipeline.unit_kind` of the private records)."""
    from privlm.prompting.pate_pipeline import affordable_labels, unit_kind

    cfg = params.config(ledger.budget.epsilon, ledger.budget.delta)
    unit = unit_kind(task_records(private, job_task(params), "private"))
    fits = affordable_labels(ledger, cfg, queries, unit)
    if fits < queries:
        raise PrivlmError(
            f"refused before any work: the dataset's budget left affords {fits} of the "
            f"{queries} PromptPATE queries (one per public input) at their data-independent "
            f"worst case under σ1 {cfg.sigma_threshold:g} and σ2 {cfg.sigma:g}. Give a public "
            f"dataset of at most {fits} inputs, or raise sigma_threshold and sigma; nothing "
            "was charged"
        )


def check_synth_labels(params: SynthParams, ds: Dataset) -> None:
    """At submission, before any charge: the declared label set fits the dataset
    (:func:`privlm.synth.labels.declared_labels`)."""
    from privlm.service.datasets import load_records
    from privlm.synth.labels import declared_labels

    try:
        declared_labels(load_records(ds), params.labels)
    except PrivlmError as exc:
        raise PrivlmError(f"params.labels: {exc}") from None


@lru_cache(maxsize=4)
def tokenizer_of(model: str) -> Any:
    """The service model's tokenizer (verbalisers are checked against it at submission)."""
    from privlm.models.loading import load_tokenizer

    return load_tokenizer(model)


def task_records(ds: Dataset, task: Task, role: str) -> list[Record]:
    """The dataset's records as ``role`` data of ``task``; errors name the dataset, the line
    and the field, never the content."""
    from privlm.prompting.task_data import load_task_records

    try:
        return load_task_records(ds.path, task, role).records
    except DataError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        raise PrivlmError(f"dataset {ds.id} ({role} data): {where}{exc.problem}") from None


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
