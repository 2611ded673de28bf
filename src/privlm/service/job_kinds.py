"""Every job kind the service runs, one registered record each: its parameters (and the
config classes they set), its runner, what it releases and guarantees, what a deployment of
it serves, and what happens to it after an interruption. The routes, the worker, the views
and the deployments read a kind from here, never by its name.

A new kind is its parameters (:mod:`privlm.service.job_params`), its runner
(:mod:`privlm.service.job_runners`) and one :func:`register_job_kind`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from privlm.errors import PrivlmError
from privlm.prompting.config import PromptDpSgdConfig, PromptPateConfig
from privlm.service.db import Job
from privlm.service.job_params import (
    DpSgdParams,
    EnsembleParams,
    JftParams,
    JobParams,
    PateParams,
    PromptDpSgdParams,
    SynthParams,
    TaskParams,
    job_task,
)
from privlm.synth.config import SynthConfig
from privlm.training.config import DpSgdConfig, EnsembleConfig, JftConfig, LoraTrainingConfig

RESTARTS = (
    "restarts, and what it charged before the interruption is not charged again (nothing "
    "was released; privlm.accounting.budgeted)"
)


@dataclass(frozen=True)
class JobKind:
    """One kind of job.

    - ``params``: its request model; ``configs``: the config classes those parameters set
      (every setting of each is a field or withheld with its reason: a test checks).
    - ``runner``: ``"module:function"``, ``(JobContext) -> result``.
    - ``releases``: what its artefact is (downloadable); None: nothing leaves the service.
    - ``guarantee(params)``: what its output guarantees, as the API and the page say it.
    - ``serves(params)``: what a deployment of it serves (an ensemble's protocol, or
      ``adapter``; None: it cannot be deployed).
    - ``resume``: what happens when its worker is gone.
    - ``public_result``: the file of its output that the tenant may save as a public
      dataset (it is DP: post-processing), or None.
    """

    name: str
    params: type[JobParams]
    configs: tuple[type, ...]
    runner: str
    releases: str | None
    guarantee: Callable[[Any], dict[str, Any]]
    serves: Callable[[Any], str | None]
    resume: str = RESTARTS
    public_result: str | None = None

    def run(self, ctx: Any) -> dict[str, Any]:
        module, attribute = self.runner.split(":")
        result: dict[str, Any] = getattr(importlib.import_module(module), attribute)(ctx)
        return result


JOB_KINDS: dict[str, JobKind] = {}


def register_job_kind(kind: JobKind) -> JobKind:
    JOB_KINDS[kind.name] = kind
    return kind


def job_kind(name: str) -> JobKind:
    found = JOB_KINDS.get(name)
    if found is None:
        raise PrivlmError(f"unknown job kind {name!r}; choose one of {', '.join(JOB_KINDS)}")
    return found


def _dp(params: Any) -> dict[str, Any]:
    return {"kind": "DP", "text": "(ε, δ)-DP per privacy unit"}


def _sdp(params: JftParams) -> dict[str, Any]:
    return {
        "kind": "SDP",
        "policy": params.detector,
        "dp_epsilon": None,
        "text": f"(ε, δ)-SDP under the policy '{params.detector}' (JFT direct mode): what the "
        "policy flags is protected; phase 1 trained without noise on the rest, so there is "
        "no ordinary DP guarantee",
    }


def _none_released(params: Any) -> dict[str, Any]:
    return {
        "kind": "none released",
        "text": "the adapters are not differentially private (each saw its part of the data "
        "in the clear) and never leave the service; a deployment's tokens are DP, and "
        "reserved on the dataset's budget",
    }


RUNNERS = "privlm.service.job_runners"
register_job_kind(JobKind(
    "dpsgd", DpSgdParams, (DpSgdConfig,), f"{RUNNERS}:run_dpsgd",
    releases="a DP LoRA adapter and its privacy statement", guarantee=_dp,
    serves=lambda p: "adapter",
))  # fmt: skip
register_job_kind(JobKind(
    "jft", JftParams, (JftConfig, DpSgdConfig), f"{RUNNERS}:run_jft",
    releases="JFT's phase-2 adapter, (ε, δ)-SDP under its policy", guarantee=_sdp,
    serves=lambda p: "adapter",
))  # fmt: skip
register_job_kind(JobKind(
    "ensemble", EnsembleParams, (EnsembleConfig, LoraTrainingConfig), f"{RUNNERS}:run_ensemble",
    releases=None, guarantee=_none_released, serves=lambda p: p.protocol,
    resume="resumes from its finished adapters",
))  # fmt: skip
register_job_kind(JobKind(
    "pate", PateParams, (PromptPateConfig,), f"{RUNNERS}:run_pate",
    releases="a student prompt, its labels charged one by one", guarantee=_dp,
    serves=lambda p: None,
))  # fmt: skip
register_job_kind(JobKind(
    "prompt-dpsgd", PromptDpSgdParams, (PromptDpSgdConfig,), f"{RUNNERS}:run_prompt_dpsgd",
    releases="a DP soft prompt or prefix", guarantee=_dp, serves=lambda p: None,
))  # fmt: skip
register_job_kind(JobKind(
    "synth", SynthParams, (SynthConfig,), f"{RUNNERS}:run_synth",
    releases="DP synthetic texts (JSONL) and their privacy statement", guarantee=_dp,
    serves=lambda p: None, resume="resumes from its written texts (no second charge)",
    public_result="synth.jsonl",
))  # fmt: skip


def validate_params(kind: str, params: dict[str, Any]) -> JobParams:
    """The typed parameters (defaults filled in), or a PrivlmError naming the problem."""
    k = job_kind(kind)
    try:
        typed = k.params(**params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in exc.errors()
        )
        raise PrivlmError(f"invalid {kind} parameters: {problems}") from None
    return checked_params(typed)


def checked_params(typed: JobParams) -> JobParams:
    """The checks a field cannot make alone: a task spec is refused now, naming its field."""
    if isinstance(typed, TaskParams):
        job_task(typed)
    return typed


@dataclass(frozen=True)
class StoredParams:
    """What a job stores: its kind's parameters and the public model it trains on."""

    params: JobParams
    model: str

    def to_json(self) -> str:
        return json.dumps({**self.params.model_dump(), "model": self.model})


def stored_params(job: Job) -> StoredParams:
    """A job's stored parameters, typed (read back as they were validated)."""
    raw = json.loads(job.params)
    model = str(raw.pop("model", ""))
    return StoredParams(job_kind(job.kind).params.model_validate(raw), model)


def public_params(job: Job) -> dict[str, Any]:
    """A job's parameters as its owner sees them: a model given as a server directory is
    shown by its name only."""
    stored = stored_params(job)
    model = stored.model
    if Path(model).is_absolute():
        model = Path(model).name
    return {**stored.params.model_dump(), "model": model}


def guarantee(job: Job) -> dict[str, Any]:
    """What a job's output guarantees, in the words the page, the API and the model card
    use: a JFT model is selective DP under its policy, never plain DP."""
    return job_kind(job.kind).guarantee(stored_params(job).params)


def serves(job: Job) -> str | None:
    """What a deployment of ``job`` serves (an ensemble's protocol, ``adapter``), or None."""
    return job_kind(job.kind).serves(stored_params(job).params)
