"""PromptPATE end to end: teachers vote on public inputs, Confident-GNMax labels them under a
ledger, the student prompt is selected on the labelled public data, and the artefact (the
student prompt and its privacy statement) is written after the ledger has been charged."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privlm.accounting import Budget, PrivacyLedger, Relation, data_independent_query_curve
from privlm.accounting.advice import suggested_delta, threshold_warning
from privlm.curator import PLACEMENT, PUBLIC, PUBLIC_SIZE, RANDOMNESS, Schema, release_statement
from privlm.data import Record
from privlm.data.partition import new_partition_key
from privlm.data.records import shared_record_count
from privlm.errors import AccountingError, BudgetExceededError, PrivlmError
from privlm.fsutil import write_directory_atomically
from privlm.models import LoadedModel, ModelSource, load_public_model
from privlm.prompting.config import TEACHER_VOTES as TEACHER_VOTES
from privlm.prompting.config import PromptPateConfig as PromptPateConfig
from privlm.prompting.pate import (
    LabellingPlan,
    Teacher,
    affordable_queries,
    blackbox_accuracy,
    label_with_confident_gnmax,
    labelled_public,
    make_teachers,
    teacher_prompts,
    vote_histograms,
)
from privlm.prompting.scoring import (
    OTHER,
    PromptScores,
    calibrate,
    score_prompts,
    top1_classes,
)
from privlm.prompting.student import StudentPrompt, select_student
from privlm.prompting.tasks import PateExamples as PateExamples
from privlm.prompting.tasks import Task, content_free_records, label_token_ids
from privlm.randomness import PrivacyRandomness
from privlm.training.model_card import model_card

# what a student prompt's privacy.json releases (privlm.curator.split_statement); the
# abstaining teachers and the raw votes' figures stay with the curator
RELEASES: Schema = {
    **dict.fromkeys(
        ("epsilon", "delta", "mechanism", "accounting", "unit", "partition_key", "queries",
         "answered", "teachers", "teacher_votes", "threshold", "sigma_threshold", "sigma",
         "threshold_warning", "model", "units", "unit_kind", "data_size"), PUBLIC,
    ),
    **RANDOMNESS,
    **PLACEMENT,
}  # fmt: skip

ACCOUNTING_STATEMENTS = {
    "data-independent": "data-independent: each query charged its worst case (threshold "
    "check and GNMax); the number of queries was fixed from that worst case",
}


@dataclass(frozen=True)
class PromptPateResult:
    student: StudentPrompt
    epsilon: float
    delta: float
    queries: int
    answered: int
    label_accuracy: float | None  # of released labels, where the public set has gold labels
    # from the raw votes, uncharged: not private, for the curator only (see to_dict)
    teacher_accuracy_mean: float | None
    ensemble_accuracy: float | None  # plurality vote of the teachers (non-private)
    other_rate: float  # fraction of top-1 answers that are no class's label token
    stopped_by_budget: bool
    seconds: float
    accounting: str
    config: dict[str, Any]
    # the threshold check against the teacher count; None when it is sound
    threshold_warning: str | None = None
    unit: str = "record"  # what the guarantee protects: a user where the data names users

    def to_dict(self) -> dict[str, Any]:
        """The result, with the figures computed from the raw votes (and the wall-clock
        time) under ``not_private_for_the_curator``: no ε covers them."""
        out = asdict(self)
        out[CURATOR_KEY] = {k: out.pop(k) for k in CURATOR_FIELDS}
        return out


CURATOR_KEY = "not_private_for_the_curator"
CURATOR_FIELDS = ("teacher_accuracy_mean", "ensemble_accuracy", "other_rate", "seconds")


def pate_delta(cfg: PromptPateConfig, private: int) -> float:
    """A new PromptPATE ledger's δ: the config's, else min(1/N^1.1, 1e-6) of N private units."""
    return cfg.delta if cfg.delta is not None else suggested_delta(private)


def pate_ledger(path: str | Path, name: str, cfg: PromptPateConfig, private: int) -> PrivacyLedger:
    """An existing ledger, or a new one with budget (ε, :func:`pate_delta`)."""
    try:
        return PrivacyLedger(path, name)
    except AccountingError:
        return PrivacyLedger(path, name, Budget(cfg.epsilon, pate_delta(cfg, private)))


@dataclass(frozen=True)
class TeacherAnswers:
    """Both kinds of teacher answer from one forward pass per teacher: (teachers × public)."""

    top1: np.ndarray  # class index or OTHER
    labels: np.ndarray  # argmax of calibrated label probabilities (never OTHER)

    def votes(self, mode: str) -> np.ndarray:
        return self.top1 if mode == "top1" else self.labels


def answers_from_scores(
    scores: PromptScores, public: int, label_ids: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """One teacher's top-1 (black-box) and calibrated label-argmax answers, from the scores
    of its ``public`` prompts followed by its content-free prompts."""
    probs = torch.softmax(scores.label_logits.double(), -1).numpy()
    cal = calibrate(probs[:public], probs[public:])
    return top1_classes(scores.top1[:public], label_ids), cal.argmax(-1).astype(np.int64)


def teacher_answer_matrix(
    lm: LoadedModel,
    task: Task,
    teachers: list[Teacher],
    public: list[Record],
    batch_size: int,
    progress: bool,
) -> TeacherAnswers:
    """Every teacher's answers on ``public``: (teachers × public) for each kind. The prompts
    of all teachers (and their content-free inputs, for calibration) are scored together in
    large batches on the model's device. A teacher without examples abstains: OTHER
    everywhere, a vote for nothing."""
    label_ids = label_token_ids(task, lm.tokenizer)
    free = content_free_records(task)
    queries = [*public, *free]
    voting = [t for t in teachers if not t.abstains]
    prompts = [p for t in voting for p in teacher_prompts(task, t, queries)]
    scores = score_prompts(lm.model, lm.tokenizer, prompts, label_ids, batch_size, progress)
    nothing = np.full(len(public), OTHER, dtype=np.int64)
    top1, labels = [], []
    k = 0
    for t in teachers:
        if t.abstains:
            top1.append(nothing)
            labels.append(nothing)
            continue
        part = slice(k * len(queries), (k + 1) * len(queries))
        a, b = answers_from_scores(
            PromptScores(scores.top1[part], scores.label_logits[part]), len(public), label_ids
        )
        top1.append(a)
        labels.append(b)
        k += 1
    return TeacherAnswers(np.stack(top1), np.stack(labels))


def check_public_inputs(private: list[Record], public: list[Record]) -> None:
    """Refuse public inputs that share a record with the private data: PromptPATE releases
    its public inputs verbatim in the student prompt, so they must be public by declaration
    and hold no private record. The refusal gives the count, never the text."""
    shared = shared_record_count(private, public)
    if shared:
        raise PrivlmError(
            f"refused: {shared} of the {len(public)} public inputs are also private records "
            "(same text). PromptPATE releases its public inputs verbatim in the student "
            "prompt, so the public data must hold no private record; remove them or use "
            "other public data"
        )


def unit_kind(private: list[Record]) -> str:
    """What PromptPATE protects: a user where the data names users (each user's examples
    are in one teacher, by a keyed hash of the user), else a record."""
    return "record" if all(r.unit.startswith("record-") for r in private) else "user"


def refuse_short_plan(affordable: int, wanted: int, when: str) -> None:
    """Refuse a labelling the budget cannot finish: it would spend and deliver less than
    asked. The refusal gives the number it could deliver, a function of the budget, the
    charges so far and σ's only (never of the votes)."""
    if affordable < wanted:
        raise BudgetExceededError(
            f"refused {when}: the budget left affords {affordable} of the {wanted} "
            "PromptPATE queries asked, at their data-independent worst case. Label at most "
            f"{affordable} public inputs (--queries {affordable}), raise σ and σ1, or raise "
            "the budget; nothing was charged"
        )


def affordable_labels(ledger: PrivacyLedger, cfg: PromptPateConfig, wanted: int, unit: str) -> int:
    """How many of ``wanted`` PromptPATE queries ``ledger`` affords now under ``cfg``'s
    σ's (what :class:`LabellingPlan` would plan), charging nothing."""
    worst = data_independent_query_curve(cfg.sigma_threshold, cfg.sigma)
    return affordable_queries(ledger, worst, wanted, Relation.of_unit_kind(unit))


def run_prompt_pate(
    model: ModelSource,
    data: PateExamples,
    out_dir: str | Path,
    cfg: PromptPateConfig | None = None,
    *,
    ledger: PrivacyLedger,
    progress: bool = True,
) -> PromptPateResult:
    """Label ``data.public`` privately with teachers built from ``data.private``, charging
    ``ledger`` (required: each label is charged before it is released, and its budget stops
    the labelling); select the student. ``pate_ledger`` makes a ledger with the config's
    budget. ``model`` is a name (loaded with the default placement) or a loaded model, which
    is only read (teachers and student are prompts, not weights)."""
    cfg = cfg or PromptPateConfig()
    task, private, public = data.task, data.private, data.public
    lm = model if isinstance(model, LoadedModel) else load_public_model(model)
    t0 = time.perf_counter()
    if not public:
        raise PrivlmError("PromptPATE needs public (unlabelled) inputs to label")
    check_public_inputs(private, public)
    rng = PrivacyRandomness(cfg.seed)
    key = cfg.partition_key if cfg.partition_key is not None else new_partition_key()
    teachers = make_teachers(private, cfg.teachers, cfg.shots, key)
    voting = sum(not t.abstains for t in teachers)
    if voting < max(2, cfg.teachers // 2):
        raise PrivlmError(
            f"only {voting} of {cfg.teachers} teachers got a private example (units are placed "
            f"by a keyed hash; {len(private)} examples for {cfg.teachers} teachers leaves many "
            "empty); give about 3 examples per teacher, or use fewer teachers"
        )
    public = public[: cfg.queries]  # fixed before any vote: never stopped by the votes
    unit = unit_kind(private)
    plan = LabellingPlan.start(ledger, cfg.sigma_threshold, cfg.sigma, len(public), unit)
    refuse_short_plan(plan.queries, len(public), "before any teacher voted")
    both = teacher_answer_matrix(lm, task, teachers, public, cfg.batch_size, progress)
    answers = both.votes(cfg.teacher_votes)
    hist = vote_histograms(answers, len(task.labels))
    labelling = label_with_confident_gnmax(
        hist, cfg.threshold, cfg.sigma_threshold, cfg.sigma, plan, cfg.teachers, rng
    )
    labelled = labelled_public(public[: labelling.queries], labelling.labels, task)
    if len(labelled) < cfg.shots + 1:
        raise PrivlmError(
            f"only {len(labelled)} of {labelling.queries} public inputs were labelled (the "
            "threshold check answered too few, or the budget ran out); the student needs at "
            f"least {cfg.shots + 1}. Lower the threshold (--threshold; params.threshold), "
            "raise the budget, or add teachers."
        )
    student = select_student(
        lm.model, lm.tokenizer, task, labelled, cfg.student_candidates, cfg.shots,
        min(cfg.holdout, max(0, len(labelled) - cfg.shots)), seed=rng.integer(), progress=progress,
    )  # fmt: skip
    gold = [r for r in public[: labelling.queries] if r.label in task.labels]
    label_acc = teacher_acc = ensemble_acc = None
    if len(gold) == labelling.queries and labelling.queries:
        truth = np.array([task.class_of(r) for r in public[: labelling.queries]])
        released = [
            (lab, t) for lab, t in zip(labelling.labels, truth, strict=True) if lab is not None
        ]
        label_acc = float(np.mean([lab == t for lab, t in released])) if released else None
        teacher_acc = float(np.mean([blackbox_accuracy(a[: len(truth)], truth) for a in answers]))
        ensemble_acc = float(np.mean(hist[: len(truth)].argmax(1) == truth))
    result = PromptPateResult(
        student=student,
        epsilon=labelling.epsilon,
        delta=labelling.delta,
        queries=labelling.queries,
        answered=labelling.answered,
        label_accuracy=label_acc,
        teacher_accuracy_mean=teacher_acc,
        ensemble_accuracy=ensemble_acc,
        other_rate=float(np.mean(both.top1 == OTHER)),
        stopped_by_budget=labelling.stopped_by_budget,
        seconds=time.perf_counter() - t0,
        accounting=labelling.accounting,
        config={**asdict(cfg), "partition_key": key, **rng.statement()},
        threshold_warning=threshold_warning(
            cfg.threshold, cfg.sigma_threshold, cfg.teachers, len(task.labels)
        ),
        unit=unit,
    )

    def write(d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        (d / "student_prompt.json").write_text(json.dumps(student.to_dict(), indent=2))
        statement = {
            "epsilon": result.epsilon,
            "delta": result.delta,
            "mechanism": "PromptPATE: Confident-GNMax over one-shot teacher prompts",
            "accounting": ACCOUNTING_STATEMENTS[result.accounting],
            "unit": "record or user (each unit in at most one teacher, by a keyed hash)",
            "partition_key": key,
            "abstaining_teachers": sum(t.abstains for t in teachers),
            **rng.statement(),
            "queries": result.queries,
            "answered": result.answered,
            "teachers": cfg.teachers,
            "teacher_votes": cfg.teacher_votes,
            "threshold": cfg.threshold,
            "sigma_threshold": cfg.sigma_threshold,
            "sigma": cfg.sigma,
            "threshold_warning": result.threshold_warning,
            "model": lm.reference,
            "units": len({r.unit for r in private}),
            "unit_kind": unit,
            "data_size": PUBLIC_SIZE,
            **lm.placement.describe(),
        }
        statement = release_statement(statement, RELEASES, out_dir)  # statistics beside
        (d / "privacy.json").write_text(json.dumps(statement, indent=2))
        card = model_card(statement, "A privlm student prompt (PromptPATE)", library=None)
        (d / "README.md").write_text(card)

    write_directory_atomically(Path(out_dir), write)  # the labels were charged query by query
    return result
