"""The HTTP API's answers (and the job request), typed in one place, as vLLM's
``protocol.py``: every route declares its response model, so the OpenAPI schema documents
every answer, and an answer holds only the fields declared here (an undeclared field is an
error, never released: ``extra="forbid"``; ``tests/service/test_protocol.py`` checks the
schema against a live call of each route).

The unions that follow the registries are built when the app is assembled: a job's request
and view by kind (:mod:`privlm.service.job_kinds`), a deployment's request by mechanism
(:mod:`privlm.predict.mechanisms`, :func:`privlm.service.deployments.deployment_request`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, create_model

from privlm.service.job_kinds import JOB_KINDS, JobKind
from privlm.service.strict import STRICT_BODY


class Answer(BaseModel):
    """An API answer: only its declared fields, each documented in the schema."""

    model_config = ConfigDict(extra="forbid")


# -- errors ------------------------------------------------------------------------------------


class ErrorDetail(Answer):
    type: str = Field(description="invalid_request, not_found, budget_exceeded, conflict, …")
    message: str = Field(description="What went wrong and what to do; never the request body")


class ErrorAnswer(Answer):
    """Every error: ``{"error": {"type", "message"}}``."""

    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorAnswer, "description": why}
    for status, why in (
        (400, "Invalid request (the message names the field)"),
        (401, "No valid API key"),
        (404, "No such resource for this tenant"),
        (409, "Conflict (a budget that does not fit, a dependent resource)"),
    )
}


# -- budgets -----------------------------------------------------------------------------------


class EpsilonDelta(Answer):
    epsilon: float
    delta: float


class Epsilon(Answer):
    epsilon: float


class GuaranteeSpent(Answer):
    epsilon: float
    note: str | None = None


class ChargeView(Answer):
    """One charge on a dataset's budget (no figure of the data: the charge is its ε)."""

    mechanism: str
    guarantee: str = Field(description="DP or SDP")
    at: str
    deployment: str | None = None
    job: str | None = None


class PerPartView(Answer):
    """SubMix deployments' reservations per part, kept beside the per-unit budget."""

    spent: Epsilon
    relation: str
    deployments: list[str | None]
    note: str
    ledger: str


class DatasetBudget(Answer):
    """A private dataset's budget: for the body of records, across every dataset that
    shares them (docs/service.md)."""

    epsilon: float
    delta: float
    spent: EpsilonDelta | None = None
    spent_by_guarantee: dict[str, GuaranteeSpent] | None = None
    remaining: Epsilon | None = None
    overdrawn: str | None = Field(
        None, description="Why it spent more than its budget (a restated legacy release)"
    )
    charges: list[ChargeView] | None = None
    rule: str | None = None
    relation: str | None = Field(None, description="The neighbouring relation it composes")
    per_part: PerPartView | None = None


class BudgetFigure(Answer):
    """An (ε, δ) figure, or a Rényi one at its order (SubMix, per part)."""

    epsilon: float | None = None
    delta: float | None = None
    rdp_epsilon: float | None = None
    order: float | None = None
    per: str | None = None
    as_dp: EpsilonDelta | None = None


class QueriesView(Answer):
    used: int
    total: int | None = None
    left: int | None = None


class GrowthView(Answer):
    """Why ε grows fast at first (privlm.predict.spending): ε shown after the first token,
    and what each later token adds on average."""

    first_token_epsilon: float
    later_token_epsilon: float


class ScreenView(Answer):
    """Screened PMixED's sparse-vector test."""

    score: str
    sensitivity: float
    threshold: float
    instance_epsilon: float
    laplace_scales: dict[str, float]


class DeploymentBudget(Answer):
    """What a deployment has spent and has left; fields a mechanism has no use for are
    absent (an adapter's tokens cost nothing: its training statement instead)."""

    deployment: str
    mechanism: str
    note: str
    relation: str | None = None
    radius: float | None = None
    screen: ScreenView | None = None
    budget: BudgetFigure | None = None
    spent: BudgetFigure | None = None
    remaining: BudgetFigure | None = None
    exhausted: bool | None = None
    when_spent: str | None = None
    queries: QueriesView | None = None
    growth: GrowthView | None = None
    fallback: bool | None = None
    per_token_cost: float | None = None
    training: dict[str, Any] | None = Field(
        None, description="A served adapter's privacy statement (its released part)"
    )


# -- datasets ----------------------------------------------------------------------------------


class DatasetView(Answer):
    id: str
    name: str | None
    kind: Literal["private", "public"]
    format: str
    records: int
    bytes: int
    budget: DatasetBudget | None = Field(description="None for a public dataset")
    budget_of: str | None = Field(
        None, description="The dataset whose budget this one shares (they share records)"
    )
    perturbation: dict[str, Any] | None = Field(
        description="What the browser's local perturbation reported, where it ran"
    )
    require_dp: bool
    created_at: str


class UploadedDataset(DatasetView):
    budget_note: str | None = Field(
        None, description="The budget it joined (shared records), or the default it got"
    )


class DatasetList(Answer):
    data: list[DatasetView]


class SaveAsDataset(BaseModel):
    """The request that saves a finished job's DP result (a synth job's texts) as a public
    dataset of the tenant."""

    model_config = STRICT_BODY
    name: str | None = Field(None, max_length=200, description="The new dataset's name")


class DatasetDeleted(Answer):
    id: str
    deleted: Literal[True]
    stopped_deployments: list[str]
    cancelled_jobs: list[str]
    deleted_artefacts: list[str]
    budget: str | None = Field(description="Kept: what it has spent, for a later upload")


# -- jobs --------------------------------------------------------------------------------------


class JobProgress(Answer):
    percent: float
    stage: str | None
    steps_done: int | None
    steps_total: int | None
    elapsed_s: float | None
    eta_s: float | None


class JobEpsilon(Answer):
    planned: float | None
    spent: float | None
    spent_means: str


class JobGuarantee(Answer):
    kind: str = Field(description="DP, SDP, or 'none released'")
    text: str
    policy: str | None = None
    dp_epsilon: float | None = None


class JobEvent(Answer):
    at: str
    what: str


class CuratorReport(Answer):
    """A finished job's exact statistics of its dataset, for the tenant who owns it: no ε
    covers them, so they are never in the artefact, a saved dataset or another tenant's view."""

    job_id: str
    note: str = Field(description="Not private: for the data's owner; never share it")
    not_private_for_the_curator: dict[str, Any] = Field(
        description="Exact counts of the data, and a synth job's overlap report (each text's "
        "longest word run shared with a record, n-gram overlap, near copies, PII echoed)"
    )


class _JobViewBase(Answer):
    id: str
    dataset_id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    queue_position: int | None = Field(description="1: next; None unless queued")
    stage: str | None
    progress: JobProgress
    cancel_requested: bool
    epsilon: JobEpsilon
    guarantee: JobGuarantee
    error: str | None
    attempts: int
    events: list[JobEvent]
    created_at: str
    started_at: str | None
    finished_at: str | None


def _params_view(kind: JobKind) -> type[BaseModel]:
    """A kind's parameters as a job shows them: its request fields and the public model."""
    return create_model(
        f"{_camel(kind.name)}JobParams",
        __base__=kind.params,
        model=(str, Field(description="The public model it trains on (by name)")),
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


def _kind_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in JOB_KINDS else None


def _unknown_kind() -> Discriminator:
    return Discriminator(
        _kind_tag,
        custom_error_type="unknown_job_kind",
        custom_error_message=f"unknown job kind; choose one of {', '.join(JOB_KINDS)}",
    )


def job_view() -> Any:
    """A job as the API shows it: a union over the kinds registered now, by ``kind``."""
    variants = [
        Annotated[
            create_model(
                f"{_camel(k.name)}Job", __base__=_JobViewBase,
                kind=(_literal(k.name), ...), params=(_params_view(k), ...),
            ),
            Tag(k.name),
        ]
        for k in JOB_KINDS.values()
    ]  # fmt: skip
    return Annotated[Union[tuple(variants)], _unknown_kind()]  # noqa: UP007


def job_list() -> type[BaseModel]:
    items: Any = list[job_view()]  # type: ignore[misc]
    return create_model("JobList", __base__=Answer, data=(items, ...))


def _literal(value: str) -> Any:
    return Literal[value]


def job_request() -> Any:
    """``POST /v1/jobs``'s body: a union over the kinds registered now, by ``kind``, each
    with its kind's typed parameters (defaults, bounds and help from its config classes)."""
    variants = []
    for k in JOB_KINDS.values():
        try:
            params: Any = (k.params, Field(default_factory=k.params))
            k.params()
        except Exception:  # a kind with required parameters (a task): no default
            params = (k.params, ...)
        model = create_model(
            f"{_camel(k.name)}JobRequest",
            __config__=STRICT_BODY,
            kind=(_literal(k.name), ...),
            dataset_id=(str, Field(..., max_length=40)),
            params=params,
        )
        variants.append(Annotated[model, Tag(k.name)])
    return Annotated[Union[tuple(variants)], _unknown_kind()]  # noqa: UP007


# -- deployments and models --------------------------------------------------------------------


class Guarantee(Answer):
    kind: str = Field(description="DP, RDP, SDP, or 'DP release' for an adapter")
    relation: str
    text: str
    order: float | None = None
    epsilon: float | None = Field(None, description="ε of the recorded reservation, if (ε, δ)")
    delta: float | None = None


class DeploymentView(Answer):
    id: str
    job_id: str
    mechanism: str
    params: dict[str, Any] = Field(description="Its mechanism's request, as given")
    fallback: bool
    budget: EpsilonDelta
    guarantee: Guarantee
    created_at: str


class DeploymentList(Answer):
    data: list[DeploymentView]


class MechanismField(Answer):
    name: str
    type: str
    default: Any = None
    bounds: dict[str, float]
    choices: list[str] | None
    help: str


class MechanismView(Answer):
    name: str
    summary: str
    serves: str
    charges_tokens: bool
    relation: str
    fields: list[MechanismField]
    withheld: dict[str, str] = Field(description="Settings a tenant may not set, and why")


class MechanismList(Answer):
    data: list[MechanismView]


class ModelGuarantee(Answer):
    mechanism: str
    guarantee: Guarantee


class ModelView(Answer):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    privlm: ModelGuarantee


class ModelList(Answer):
    object: Literal["list"]
    data: list[ModelView]


# -- completions (OpenAI's shapes) -------------------------------------------------------------


class Usage(Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ReleaseNote(Answer):
    """What a completion released: private tokens (charged), public ones (free)."""

    private_tokens: int
    public_tokens: int
    fallback: bool
    note: str | None
    free_tokens: int | None = Field(None, description="Screened PMixED's public-model tokens")


class CompletionChoice(Answer):
    text: str
    index: int
    logprobs: None
    finish_reason: str | None


class AssistantMessage(Answer):
    role: Literal["assistant"]
    content: str


class ChatChoice(Answer):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: str | None


class _CompletionBase(Answer):
    id: str
    created: int
    model: str
    usage: Usage
    privlm: ReleaseNote


class CompletionAnswer(_CompletionBase):
    """``POST /v1/completions`` without ``stream`` (with it: server-sent events of the same
    pieces, OpenAI's chunk shape)."""

    object: Literal["text_completion"]
    choices: list[CompletionChoice]


class ChatCompletionAnswer(_CompletionBase):
    object: Literal["chat.completion"]
    choices: list[ChatChoice]


def streamed(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A generation route's documented answers: the whole JSON body, or the stream."""
    return {
        200: {
            "model": model,
            "description": "The completion; with stream: true, server-sent events "
            "(text/event-stream) of OpenAI's chunk shape, then data: [DONE]",
            "content": {"text/event-stream": {}},
        },
        429: {"model": ErrorAnswer, "description": "Budget spent, or too many requests"},
        503: {"model": ErrorAnswer, "description": "Overloaded: retry after Retry-After"},
        **ERRORS,
    }


# -- the page's public routes ------------------------------------------------------------------


class ApiKeyView(Answer):
    """An API key as its tenant sees it: never the key nor its hash."""

    prefix: str = Field(description="The key's first 12 characters")
    state: Literal["active", "expired", "revoked"]
    created_at: str
    expires_at: str | None = Field(description="When it stops working (None: never)")
    revoked_at: str | None


class ApiKeyList(Answer):
    data: list[ApiKeyView]


class NewApiKey(Answer):
    """A key just made: the key itself, shown this once, and its row."""

    api_key: str = Field(description="The key (shown once; only its hash is stored)")
    key: ApiKeyView


class NewKeyRequest(BaseModel):
    """An operator's request for a tenant's new key."""

    model_config = STRICT_BODY
    expires_in_days: float | None = Field(
        None, gt=0, le=3650, description="It stops working this many days from now (None: never)"
    )


class NewTenantRequest(BaseModel):
    model_config = STRICT_BODY
    name: str = Field(min_length=1, max_length=200, description="The tenant's name")


class TenantView(Answer):
    name: str
    id: str
    created_at: str
    active_keys: int = Field(description="Keys that work now (not revoked, not expired)")


class TenantList(Answer):
    data: list[TenantView]


class NewTenant(Answer):
    tenant: TenantView
    api_key: str = Field(description="Its first key (shown once)")


class WorkersHealth(Answer):
    expected: int = Field(description="Job workers privlm serve keeps running")
    alive: int
    restarts: int = Field(description="Workers started again after one died")
    gave_up: bool = Field(description="A worker died too often and is not started again")


class QueueHealth(Answer):
    queued: int
    running: int
    stale_running: int = Field(description="Running jobs whose worker stopped beating")
    oldest_queued_s: float | None
    age_s: float | None = Field(description="How old these numbers are (refreshed every 2 s)")


class Health(Answer):
    status: Literal["ok", "degraded"]
    model: str
    problems: list[str] = Field(description="Why it is degraded (empty when ok)")
    workers: WorkersHealth | None = Field(
        description="The supervised job workers (None: they run elsewhere)"
    )
    queue: QueueHealth | None = Field(description="None until the first snapshot")


class ReadabilityPoint(Answer):
    epsilon: float
    share_unchanged: float = Field(description="Of words, on public text")


class PerturbationDefault(Answer):
    """A mechanism's default ε per word and the trade-off it was chosen from: the share of
    words that come through unchanged at each ε, measured on public text (never on a
    tenant's data: privlm.perturb.readability)."""

    epsilon: float
    delta: float | None = Field(description="δ per word (None: the Laplace mechanism)")
    readable_share: float = Field(description="The default is the least ε keeping this share")
    few_share: float = Field(description="At most this share: the text reads as noise")
    most_share: float = Field(description="At least this share: the step hides next to nothing")
    measured: list[ReadabilityPoint]


class Defaults(Answer):
    dataset_budget: EpsilonDelta
    perturbation: dict[Literal["laplace", "gaussian"], PerturbationDefault]


class PerturbWords(Answer):
    words: list[str]
    dim: int
    clip: float
    source: str
