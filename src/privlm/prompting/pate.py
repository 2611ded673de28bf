"""PromptPATE (Flocks §4.2, App. C.2): teacher prompts on disjoint private examples, public
inputs labelled by Confident-GNMax on the vote histogram, a student prompt from the labels.

1. ``make_teachers``: each teacher is a k-shot prompt (one-shot by default) whose
   demonstrations are private examples; every private unit is in at most one teacher, placed
   by a keyed hash of its identity, so one unit more or less changes one teacher only.
2. ``teacher_votes``: each teacher answers each public input in black-box mode (top-1
   token); answers that map to no class are "other" and vote for nothing. Only the
   histogram of votes per class leaves this function's caller (``vote_histograms``).
3. ``LabellingPlan`` then ``label_with_confident_gnmax``: per public input, the noisy
   threshold check, then GNMax (Algorithm 2), on a number of public inputs fixed before any
   vote is seen (plan and check, :mod:`privlm.accounting.budgeted`): the data-independent
   worst case is charged durably before each label is drawn. (PATE 2018's
   data-dependent cost, released through smooth sensitivity, is a noisy estimate and never
   a ledger figure: ``privlm.accounting.pate`` keeps its math, and the mode is refused.)
   Nothing stops on the votes.
4. ``select_student``: candidate prompts built from the *labelled public* inputs, chosen by
   accuracy on a held-back part of the labelled public set: no private data is touched, so
   the student costs nothing beyond the labels (post-processing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privlm.accounting import (
    Charge,
    PrivacyLedger,
    RdpCurve,
    Relation,
    data_independent_query_curve,
)
from privlm.accounting.budgeted import BudgetedRun, recorded_steps
from privlm.data import Record
from privlm.data.partition import (
    assign_parts,
    derive_key,
    keyed_hash,
    new_partition_key,
    record_identities,
)
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.prompting.config import ACCOUNTING as ACCOUNTING
from privlm.prompting.scoring import OTHER
from privlm.prompting.tasks import Task, build_prompt
from privlm.randomness import PrivacyRandomness, as_randomness


@dataclass(frozen=True)
class Teacher:
    demos: tuple[Record, ...]  # empty: the teacher abstains (votes for nothing)

    @property
    def abstains(self) -> bool:
        return not self.demos


def _identities(private: Sequence[Record]) -> list[str]:
    """Unit identities: user ids, or, for record-level units (``record-N``, whose number
    shifts when another record is removed), each record's content and occurrence."""
    if all(r.unit.startswith("record-") for r in private):
        return record_identities(list(private))
    return [r.unit for r in private]


def make_teachers(
    private: Sequence[Record], teachers: int, shots: int = 1, key: str | None = None
) -> list[Teacher]:
    """``teachers`` prompts from disjoint private units.

    Each unit goes to teacher ``HMAC(key, identity) mod teachers``, a function of that unit
    alone, so removing one unit changes one teacher only: the sensitivity GNMax assumes.
    A teacher uses ``shots`` of its examples, chosen by a second keyed hash of their own
    identities (so the choice depends on that teacher's examples only); a teacher with fewer
    uses what it has, and a teacher with none abstains: it casts no vote, which changes one
    count by at most one. ``key`` (hex) defaults to a fresh random key; the CLI and service
    record it with the run."""
    if teachers < 1 or shots < 1:
        raise PrivlmError("teachers and shots must be at least 1")
    if not private:
        raise PrivlmError("PromptPATE needs private examples to build teachers from")
    key = key if key is not None else new_partition_key()
    ids = _identities(private)
    rank_key = derive_key(key, "demo-order")
    pools: list[list[tuple[int, Record]]] = [[] for _ in range(teachers)]
    for r, ident, t in zip(private, ids, assign_parts(ids, teachers, key), strict=True):
        pools[t].append((keyed_hash(rank_key, ident + "\0" + r.text), r))
    return [
        Teacher(tuple(r for _, r in sorted(pool, key=lambda x: x[0])[:shots])) for pool in pools
    ]


def teacher_prompts(task: Task, teacher: Teacher, queries: Sequence[Record]) -> list[str]:
    return [build_prompt(task, list(teacher.demos), q) for q in queries]


def vote_histograms(answers: NDArray[np.int64], classes: int) -> NDArray[np.int64]:
    """(teachers × queries) answers → (queries × classes) counts; OTHER votes for nothing."""
    a = np.asarray(answers)
    if a.ndim != 2:
        raise PrivlmError("answers must be a (teachers × queries) matrix")
    out = np.zeros((a.shape[1], classes), dtype=np.int64)
    for c in range(classes):
        out[:, c] = (a == c).sum(0)
    return out


@dataclass
class LabellingResult:
    labels: list[int | None]  # None: the threshold check said no (⊥)
    answered: int
    queries: int  # how many queries ran; fixed before any vote was seen
    stopped_by_budget: bool  # data-independent: the plan fitted fewer queries than asked
    epsilon: float
    delta: float
    teachers: int
    threshold: float
    sigma_threshold: float
    sigma: float
    accounting: str = "data-independent"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def affordable_queries(
    ledger: PrivacyLedger, per_query: RdpCurve, wanted: int, relation: Relation
) -> int:
    """The most queries, up to ``wanted``, whose data-independent worst case fits ``ledger``
    now: a function of the budget, the charges so far and σ's, never of the votes."""
    lo, hi = 0, wanted
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ledger.fits(Charge("pate-query", rdp=per_query.times(mid), relation=relation)):
            lo = mid
        else:
            hi = mid - 1
    return lo


LABELLING = "PromptPATE's labelling"


@dataclass(frozen=True)
class LabellingPlan:
    """Steps 1 and 2 of :mod:`privlm.accounting.budgeted` for PromptPATE, before any vote is
    computed: the queries the budget affords at their data-independent worst case (every
    one answered: threshold check and GNMax), one planned charge each, checked together.
    Step 4 charges each durably before its label is drawn (:func:`label_with_confident_gnmax`).
    A job restarted after an interruption finds the queries it already charged
    (:func:`~privlm.accounting.budgeted.recorded_steps`) and draws their labels again
    under those charges, never charging them twice (no label of the first attempt left)."""

    budget: BudgetedRun
    wanted: int

    @classmethod
    def start(
        cls,
        ledger: PrivacyLedger,
        sigma_threshold: float,
        sigma: float,
        wanted: int,
        unit: str = "record",
    ) -> LabellingPlan:
        """``unit``: the privacy unit teachers are keyed by (a record, or a user: each
        unit's examples are in one teacher), the relation every charge carries."""
        worst = data_independent_query_curve(sigma_threshold, sigma)
        relation = Relation.of_unit_kind(unit)
        paid = min(wanted, len(recorded_steps(ledger, LABELLING)))  # charged before a restart
        if paid < wanted:
            with contextlib.suppress(BudgetExceededError):  # a cost is counted below; a
                ledger.require_fits(  # relation the ledger refuses is refused now
                    Charge("pate-query", rdp=worst, unit=unit, relation=relation), LABELLING
                )
        count = paid + affordable_queries(ledger, worst, wanted - paid, relation)
        charges = [
            Charge(
                "pate-query",
                rdp=worst,
                unit=unit,
                relation=relation,
                params={"data_independent": True},
            )
            for _ in range(count)
        ]
        return cls(BudgetedRun.start(ledger, LABELLING, *charges), wanted)

    @property
    def queries(self) -> int:
        return len(self.budget.planned)

    @property
    def stopped_by_budget(self) -> bool:
        return self.queries < self.wanted


def label_with_confident_gnmax(
    histograms: NDArray[np.int64],
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    plan: LabellingPlan,
    teachers: int,
    rng: PrivacyRandomness | int | None = None,
) -> LabellingResult:
    """Algorithm 2 on the first ``plan.queries`` histograms (one per public input, their
    number fixed before any vote was seen), each query's worst case charged durably before
    its noisy threshold check and GNMax are drawn. Sound whatever the votes; nothing
    depends on them. (PATE 2018's data-dependent figure is a noisy estimate, not an upper
    bound, so it is never charged: ``DATA_DEPENDENT_REFUSAL``.)"""
    h = np.asarray(histograms)
    if h.ndim != 2:
        raise PrivlmError("pass one vote histogram (counts per class) per public input")
    if len(h) < plan.queries:
        raise PrivlmError(f"the plan has {plan.queries} queries for {len(h)} histograms")
    noise = as_randomness(rng)  # the noisy threshold and votes: the CSPRNG unless seeded
    labels: list[int | None] = []
    for charge, votes in zip(plan.budget.planned, h, strict=False):

        def draw(v: NDArray[np.int64] = votes) -> int | None:
            return _confident_gnmax(v, threshold, sigma_threshold, sigma, noise)

        labels.append(plan.budget.release(charge, draw))  # charged, then drawn
    ledger = plan.budget.ledger
    assert ledger is not None  # PromptPATE always labels under a ledger
    return LabellingResult(
        labels=labels,
        answered=sum(x is not None for x in labels),
        queries=len(labels),
        stopped_by_budget=plan.stopped_by_budget,
        epsilon=ledger.spent().epsilon,
        delta=ledger.budget.delta,
        teachers=teachers,
        threshold=threshold,
        sigma_threshold=sigma_threshold,
        sigma=sigma,
    )


def _confident_gnmax(
    votes: NDArray[np.int64],
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    rng: PrivacyRandomness,
) -> int | None:
    """One run of Algorithm 2: the noisy threshold check, then GNMax (None: ⊥)."""
    if votes.max() + float(rng.normal(sigma_threshold)) < threshold:
        return None
    return int(np.argmax(votes + rng.normal(sigma, votes.shape)))


def labelled_public(
    public: Sequence[Record], labels: Sequence[int | None], task: Task
) -> list[Record]:
    """The public inputs that got a label, with the label's name in place of any original."""
    return [
        Record(r.text, r.unit, task.labels[lab], r.line, r.fields)
        for r, lab in zip(public, labels, strict=False)
        if lab is not None
    ]


def blackbox_accuracy(
    answers: NDArray[np.int64], truth: Sequence[int] | NDArray[np.int64]
) -> float:
    """Accuracy where an OTHER answer counts as wrong."""
    a = np.asarray(answers)
    return float(np.mean((a == np.asarray(truth)) & (a != OTHER)))
