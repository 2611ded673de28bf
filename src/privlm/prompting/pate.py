"""PromptPATE (Flocks §4.2, App. C.2): teacher prompts on disjoint private examples, public
inputs labelled by Confident-GNMax on the vote histogram, a student prompt from the labels.

1. ``make_teachers``: each teacher is a k-shot prompt (one-shot by default) whose
   demonstrations are private examples; every private unit is in at most one teacher, placed
   by a keyed hash of its identity, so one unit more or less changes one teacher only.
2. ``teacher_votes``: each teacher answers each public input in black-box mode (top-1
   token); answers that map to no class are "other" and vote for nothing. Only the
   histogram of votes per class leaves this function's caller (``vote_histograms``).
3. ``label_with_confident_gnmax``: per public input, the noisy threshold check, then GNMax
   (Algorithm 2). Each query's data-dependent RDP (``privlm.accounting.pate``) is charged to
   the ledger *before* its label is released; labelling stops, releasing nothing more, when
   the next query might not fit the budget.
4. ``select_student``: candidate prompts built from the *labelled public* inputs, chosen by
   accuracy on a held-back part of the labelled public set: no private data is touched, so
   the student costs nothing beyond the labels (post-processing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privlm.accounting import Charge, PrivacyLedger, confident_gnmax_curve
from privlm.data import Record
from privlm.data.partition import (
    assign_parts,
    derive_key,
    keyed_hash,
    new_partition_key,
    record_identities,
)
from privlm.errors import BudgetExceededError, PrivlmError
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
    """``teachers`` prompts from disjoint private units (issue 18 §1).

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
    queries: int  # how many queries ran before the budget stopped labelling
    stopped_by_budget: bool
    epsilon: float
    delta: float
    teachers: int
    threshold: float
    sigma_threshold: float
    sigma: float
    data_dependent: bool = True
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def label_with_confident_gnmax(
    histograms: NDArray[np.int64],
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    ledger: PrivacyLedger,
    teachers: int,
    rng: PrivacyRandomness | int | None = None,
) -> LabellingResult:
    """Algorithm 2 on each histogram in turn, charged to ``ledger`` before each release."""
    h = np.asarray(histograms)
    if h.ndim != 2:
        raise PrivlmError("pass one vote histogram (counts per class) per public input")
    rng = as_randomness(rng)  # the noisy threshold and votes: the CSPRNG unless seeded
    labels: list[int | None] = []
    stopped = False
    for votes in h:
        worst = confident_gnmax_curve(votes, threshold, sigma_threshold, sigma, True, teachers)
        if not ledger.fits(Charge("pate-query", rdp=worst)):
            stopped = True  # the next query might not fit: stop before drawing anything
            break
        answered = votes.max() + float(rng.normal(sigma_threshold)) >= threshold
        cost = (
            worst  # answered: the threshold check plus GNMax, already computed
            if answered
            else confident_gnmax_curve(votes, threshold, sigma_threshold, sigma, False, teachers)
        )
        try:
            ledger.charge(Charge("pate-query", rdp=cost, params={"answered": bool(answered)}))
        except BudgetExceededError:  # another process spent the budget meanwhile
            stopped = True
            break
        if answered:
            labels.append(int(np.argmax(votes + rng.normal(sigma, votes.shape))))
        else:
            labels.append(None)
    return LabellingResult(
        labels=labels,
        answered=sum(x is not None for x in labels),
        queries=len(labels),
        stopped_by_budget=stopped,
        epsilon=ledger.spent().epsilon,
        delta=ledger.budget.delta,
        teachers=teachers,
        threshold=threshold,
        sigma_threshold=sigma_threshold,
        sigma=sigma,
    )


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
