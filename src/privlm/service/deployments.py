"""Deployments: a trained ensemble served privately (PMixED or SubMix), or a DP-trained
adapter, behind an OpenAI-style completions call.

Every private token is charged to the deployment's ledger (``deployment-<id>``, in the
service database) in a committed transaction before it is released; generation for one
deployment is serialised by a lock, so its ledger sees one query at a time. When the budget
is spent a request is refused (:class:`BudgetExhausted`, HTTP 429), or, if the deployment
was created with ``fallback``, answered by the public model and flagged as such.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from privlm.accounting import Charge, PrivacyLedger, RdpCurve
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.models.pool import ModelPool
from privlm.predict.engine import CachedDecoder, EnsembleEngine
from privlm.predict.factory import build_predictor, submix_config
from privlm.predict.loading import load_ensemble
from privlm.predict.sampling import sample
from privlm.randomness import PrivacyRandomness
from privlm.service.db import Deployment, Job
from privlm.service.jobs import guarantee

MAX_TOKENS = 256


class BudgetExhausted(PrivlmError):
    """The deployment's privacy budget is spent and it has no public fallback."""


class DeploymentParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(..., max_length=40)
    mechanism: str = Field("pmixed", pattern="^(pmixed|submix|adapter)$")
    epsilon: float = Field(8.0, gt=0, le=1000)
    delta: float = Field(1e-5, gt=0, lt=1)
    queries: int = Field(256, ge=1, le=10_000_000, description="T, the private token budget")
    alpha: int = Field(3, ge=2, le=256, description="Rényi order (PMixED)")
    sample_rate: float = Field(1.0, gt=0, le=1, description="q, ensemble subsampling (PMixED)")
    beta: float | None = Field(None, gt=0, description="SubMix per-query β (default ε/T)")
    fallback: bool = Field(False, description="answer from the public model once spent")


@dataclass
class Completion:
    text: str
    tokens: int
    prompt_tokens: int
    finish_reason: str
    private_tokens: int
    public_tokens: int
    fallback: bool
    note: str | None = None


def _finish(tokens: list[int], eos: int | None, max_tokens: int, stopped: bool) -> str:
    if tokens and tokens[-1] == eos:
        return "stop"
    if stopped and len(tokens) < max_tokens:
        return "budget_exhausted"
    return "length"


@dataclass
class LoadedDeployment:
    row: Deployment
    tokenizer: Any
    engine: EnsembleEngine
    predictor: Any = None  # PMixED | SubMix | None (adapter)
    adapter_epsilon: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- budget ------------------------------------------------------------------------------

    def ledgers(self) -> list[PrivacyLedger]:
        if self.predictor is None:
            return []
        if self.row.mechanism == "submix":
            return list(self.predictor.ledgers)
        return [self.predictor.ledger]

    def exhausted(self) -> bool:
        if self.predictor is None:
            return False
        if self.row.mechanism == "pmixed":
            return bool(self.predictor.queries_left() < 1)
        return bool(self.predictor.stopped)

    def budget(self) -> dict[str, Any]:
        row = self.row
        if self.predictor is None:
            return {
                "deployment": row.id, "mechanism": "adapter",
                "per_token_cost": 0.0,
                "training": self.adapter_epsilon,
                "note": (
                    "a JFT adapter: selective DP (SDP) under its policy, not DP; its tokens "
                    "are post-processing and cost nothing more"
                    if self.adapter_epsilon.get("guarantee_kind") == "SDP"
                    else "a DP-trained adapter: its tokens are post-processing and cost nothing"
                ),
            }  # fmt: skip
        if row.mechanism == "submix":
            return self._submix_budget()
        spent = max(lg.spent().epsilon for lg in self.ledgers())
        p = self.predictor
        return {
            "deployment": row.id,
            "mechanism": row.mechanism,
            "budget": {"epsilon": row.budget_epsilon, "delta": row.budget_delta},
            "spent": {"epsilon": spent, "delta": row.budget_delta},
            "remaining": {"epsilon": max(row.budget_epsilon - spent, 0.0)},
            "exhausted": self.exhausted(),
            "fallback": row.fallback,
            "queries": {
                "used": p.queries_used(), "total": p.config.queries, "left": p.queries_left()
            },
            "note": "(ε, δ)-DP over all T queries, reserved on the dataset's budget at "
            "creation. Even one query shows a large ε: the RDP-to-(ε, δ) conversion adds "
            "about log(1/δ)/(α−1) at the first query, and little after it.",
        }  # fmt: skip

    def _submix_budget(self) -> dict[str, Any]:
        """SubMix's budget is Rényi DP at order α per part (Algorithm 2), shown as such, with
        its (ε, δ) conversion beside it, never as if it were an (ε, δ) pair itself."""
        cfg = self.predictor.config
        spent = max(lg.spent().epsilon for lg in self.ledgers())  # RDP at order α
        return {
            "deployment": self.row.id,
            "mechanism": "submix",
            "budget": {
                "rdp_epsilon": cfg.epsilon, "order": cfg.alpha, "per": "part",
                "as_dp": {"epsilon": cfg.lifetime_curve().to_dp(cfg.delta).epsilon,
                          "delta": cfg.delta},
            },
            "spent": {"rdp_epsilon": spent, "order": cfg.alpha},
            "remaining": {"rdp_epsilon": max(cfg.epsilon - spent, 0.0), "order": cfg.alpha},
            "exhausted": self.exhausted(),
            "fallback": self.row.fallback,
            "queries": {"used": self.ledgers()[0].count()},
            "note": "Rényi DP at order α for each part (a unit lies in one part); as_dp is "
            "what that converts to at δ, and what the dataset's budget was charged",
        }  # fmt: skip

    # -- generation --------------------------------------------------------------------------

    def _decode(self, prompt: str, max_tokens: int, row: int) -> list[int]:
        """Plain sampling from one engine row: −1 the public model, 0 the adapter."""
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"] or [
            self.tokenizer.eos_token_id
        ]
        gen = PrivacyRandomness()
        decoder = CachedDecoder(self.engine, ids, [row], max_tokens)
        out: list[int] = []
        with torch.no_grad():
            for _ in range(max_tokens):
                token = sample(decoder.last[0], gen)
                out.append(token)
                if token == self.tokenizer.eos_token_id:
                    break
                decoder.advance(token)
        return out

    def complete(self, prompt: str, max_tokens: int) -> Completion:
        if not (1 <= max_tokens <= MAX_TOKENS):
            raise PrivlmError(f"max_tokens must be between 1 and {MAX_TOKENS}")
        n_prompt = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        eos = self.tokenizer.eos_token_id
        with self.lock:
            if self.predictor is None:
                toks = self._decode(prompt, max_tokens, 0)
                return Completion(
                    self.tokenizer.decode(toks), len(toks), n_prompt,
                    _finish(toks, eos, max_tokens, False), 0, len(toks), False,
                    "JFT adapter: (ε, δ)-SDP under its policy, not DP (post-processing: no "
                    "per-token charge)" if self.adapter_epsilon.get("guarantee_kind") == "SDP"
                    else "DP-trained adapter (post-processing: no per-token charge)",
                )  # fmt: skip
            if self.exhausted():
                return self._fallback_or_refuse(prompt, max_tokens, n_prompt)
            try:
                gen = self.predictor.generate(prompt, max_new_tokens=max_tokens)
            except BudgetExceededError:
                return self._fallback_or_refuse(prompt, max_tokens, n_prompt)
            extra = gen.extra or {}
            private = int(extra.get("private_tokens", len(gen.token_ids)))
            public = len(gen.token_ids) - private
            if self.row.mechanism == "submix" and public and not self.row.fallback:
                # SubMix answers from the public model after STOP; without fallback the
                # deployment releases only the private tokens it charged
                keep = gen.token_ids[:private]
                if not keep:
                    return self._fallback_or_refuse(prompt, max_tokens, n_prompt)
                return Completion(
                    self.tokenizer.decode(keep), len(keep), n_prompt, "budget_exhausted",
                    private, 0, False, gen.stopped,
                )  # fmt: skip
            if not gen.token_ids and gen.stopped:
                return self._fallback_or_refuse(prompt, max_tokens, n_prompt)
            return Completion(
                gen.text, len(gen.token_ids), n_prompt,
                _finish(gen.token_ids, eos, max_tokens, gen.stopped is not None),
                private, public, public > 0, gen.stopped,
            )  # fmt: skip

    def _fallback_or_refuse(self, prompt: str, max_tokens: int, n_prompt: int) -> Completion:
        if not self.row.fallback:
            b = self.budget()
            spent = (
                f"RDP ε {b['spent']['rdp_epsilon']:.4g} of {b['budget']['rdp_epsilon']:g} at "
                f"order α={b['budget']['order']:g}"
                if self.row.mechanism == "submix"
                else f"ε {b['spent']['epsilon']:.4g} of {self.row.budget_epsilon:g} at δ "
                f"{self.row.budget_delta:g}"
            )
            raise BudgetExhausted(
                f"the privacy budget of deployment {self.row.id} is spent ({spent}); no "
                "further private tokens can be released"
            )
        toks = self._decode(prompt, max_tokens, -1)
        return Completion(
            self.tokenizer.decode(toks), len(toks), n_prompt,
            _finish(toks, self.tokenizer.eos_token_id, max_tokens, False), 0, len(toks), True,
            "the privacy budget is spent: this answer comes from the public model alone",
        )  # fmt: skip


class DeploymentRuntime:
    """Loaded deployments, kept in memory; each is loaded on its first request."""

    def __init__(self, ledger_url: str) -> None:
        self.ledger_url = ledger_url
        self._loaded: dict[str, LoadedDeployment] = {}
        self._lock = threading.Lock()
        self.models = ModelPool()  # one copy of each public model, shared by deployments

    def get(self, row: Deployment, job: Job) -> LoadedDeployment:
        with self._lock:
            if row.id not in self._loaded:
                self._loaded[row.id] = load_deployment(row, job, self.ledger_url, self.models)
            return self._loaded[row.id]


def load_deployment(
    row: Deployment, job: Job, ledger_url: str, models: ModelPool | None = None
) -> LoadedDeployment:
    """A deployment ready to answer, its public model taken from ``models`` (the serve
    --device policy) so that deployments of one model share its weights."""
    models = models if models is not None else ModelPool()
    p = json.loads(row.params)
    out = Path(job.output_dir)
    if row.mechanism in ("pmixed", "submix"):
        loaded = load_ensemble(out, pool=models)
        lm, engine, _ = loaded
        predictor = build_predictor(
            row.mechanism, out, loaded, ledger_url, f"deployment-{row.id}", row.budget_epsilon,
            row.budget_delta, p["alpha"], p["queries"], p["sample_rate"], p["beta"], None,
        )  # fmt: skip
        return LoadedDeployment(row, lm.tokenizer, engine, predictor)
    statement = json.loads((out / "privacy.json").read_text())
    lm = models.get(json.loads(job.params)["model"])
    engine = EnsembleEngine.from_directories(lm.model, [out])
    keys = ("epsilon", "delta", "mechanism", "guarantee_kind", "policy", "dp_epsilon", "not_dp")
    eps = {k: statement.get(k) for k in keys if k in statement}
    return LoadedDeployment(row, lm.tokenizer, engine, None, eps)


def deployment_guarantee(row: Deployment, job: Job | None) -> dict[str, Any]:
    """What a deployment's answers guarantee (issue 18 §2 and §3): PMixED in (ε, δ), SubMix
    in Rényi DP at its order, a DP adapter's training ε, or a JFT adapter's SDP."""
    p = json.loads(row.params)
    if row.mechanism == "pmixed":
        return {"kind": "DP", "text": f"({row.budget_epsilon:g}, {row.budget_delta:g})-DP "
                "over all its private tokens, per unit of the dataset"}  # fmt: skip
    if row.mechanism == "submix":
        return {"kind": "RDP", "order": p["alpha"], "rdp_epsilon": p["epsilon"],
                "text": f"(α={p['alpha']:g}, ε={p['epsilon']:g})-Rényi DP per part"}  # fmt: skip
    if job is not None and job.kind == "jft":
        return guarantee(job)
    return {"kind": "DP", "text": "a DP-trained adapter: its tokens are post-processing"}


def check_config(p: DeploymentParams) -> None:
    """Refuse at creation a configuration the mechanism would refuse at the first token."""
    from privlm.predict.pmixed import PMixEDConfig

    if p.mechanism == "pmixed":
        PMixEDConfig(p.epsilon, p.delta, p.alpha, p.queries, p.sample_rate)
    elif p.mechanism == "submix":
        submix_config(p.epsilon, p.alpha, p.beta, p.queries, p.delta)


def lifetime_cost(p: DeploymentParams, job: Job) -> RdpCurve | None:
    """Everything the deployment can ever release about its dataset, as one RDP curve:
    PMixED's T queries at the radius its ensemble gets, or SubMix's (α, ε) per part. None
    for a DP adapter, whose tokens are post-processing of a release already charged.

    privlm reserves this on the dataset's ledger when the deployment is created (issue 17
    §3), so every deployment of every ensemble counts against the dataset's one budget."""
    from privlm.predict.pmixed import PMixEDConfig
    from privlm.training.ensemble import load_manifest

    if p.mechanism == "pmixed":
        cfg = PMixEDConfig(p.epsilon, p.delta, p.alpha, p.queries, p.sample_rate)
        return cfg.lifetime_curve(len(load_manifest(job.output_dir)["partition"]))
    if p.mechanism == "submix":
        return submix_config(p.epsilon, p.alpha, p.beta, p.queries, p.delta).lifetime_curve()
    return None


def reserve_on_dataset(ledger: PrivacyLedger, p: DeploymentParams, job: Job, dep_id: str) -> None:
    """Charge the deployment's whole cost to its dataset's ledger, durably, or refuse
    (:class:`BudgetExceededError`, recording nothing) if it does not fit."""
    cost = lifetime_cost(p, job)
    if cost is None:
        return
    ledger.charge(
        Charge(
            "deployment-reservation",
            rdp=cost,
            unit="ensemble member (one part of the data)",
            params={
                "deployment": dep_id,
                "job": job.id,
                "mechanism": p.mechanism,
                "epsilon": p.epsilon,
                "delta": p.delta,
                "queries": p.queries,
                "alpha": p.alpha,
            },
        )
    )


def create_ledgers(row: Deployment, job: Job, ledger_url: str) -> None:
    """Open the deployment's budget in the ledger at creation, so it is durable (and
    visible) before the first token."""
    from privlm.accounting import Budget
    from privlm.predict.submix import part_ledgers
    from privlm.training.ensemble import load_manifest

    p = DeploymentParams(**json.loads(row.params))
    name = f"deployment-{row.id}"
    if row.mechanism == "pmixed":
        PrivacyLedger(ledger_url, name, Budget(row.budget_epsilon, row.budget_delta))
    elif row.mechanism == "submix":
        cfg = submix_config(p.epsilon, p.alpha, p.beta, p.queries, p.delta)
        parts = len(load_manifest(job.output_dir)["partition"]) // 2
        part_ledgers(ledger_url, name, parts, cfg)


def check_deployable(job: Job, mechanism: str) -> None:
    if job.status != "succeeded":
        raise PrivlmError(f"job {job.id} has not succeeded (status {job.status})")
    if job.kind == "ensemble":
        protocol = json.loads(job.params)["protocol"]
        if mechanism != protocol:
            raise PrivlmError(
                f"job {job.id} trained a {protocol} ensemble; deploy it with mechanism {protocol}"
            )
    elif job.kind in ("dpsgd", "jft"):
        if mechanism != "adapter":
            raise PrivlmError(f"job {job.id} trained one DP adapter; deploy it as 'adapter'")
    else:
        raise PrivlmError(f"a {job.kind} job has no model to deploy")
