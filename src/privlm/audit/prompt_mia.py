"""Membership inference against prompts (Flocks §3).

The attacker queries the prompted model and scores each candidate by the probability it
gives the candidate's correct class; the member (a demonstration in the prompt) tends to
score higher. For a one-shot prompt, the member is its demonstration and the non-members
are 50 other examples of the same distribution. ``prompt_mia`` repeats this over many
random prompts and reports the AUC pooled over all (member, non-member) pairs, and the
mean of the per-prompt AUCs.

For PromptPATE the released prompt is the student's, built from public data; its members
are the private examples in the teachers' prompts (``student_mia``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import rankdata
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.progress import progress_bar
from privlm.prompting.evaluate import prompt_probabilities
from privlm.prompting.tasks import Task


def auc(members: ArrayLike, nonmembers: ArrayLike) -> float:
    """P(member score > non-member score) + ½·P(tie): the ROC AUC (Mann–Whitney U)."""
    m = np.asarray(members, dtype=np.float64).ravel()
    n = np.asarray(nonmembers, dtype=np.float64).ravel()
    if m.size == 0 or n.size == 0:
        raise PrivlmError("an AUC needs at least one member and one non-member score")
    ranks = rankdata(np.concatenate([m, n]))
    u = ranks[: m.size].sum() - m.size * (m.size + 1) / 2
    return float(u / (m.size * n.size))


def auc_standard_error(value: float, members: int, nonmembers: int) -> float:
    """Standard error of an AUC from ``members`` × ``nonmembers`` scores (Hanley & McNeil
    1982, Eq. 1): how far from 0.5 an AUC must be before it says anything."""
    if members < 1 or nonmembers < 1:
        raise PrivlmError("an AUC needs at least one member and one non-member score")
    a = float(value)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (members - 1) * (q1 - a * a) + (nonmembers - 1) * (q2 - a * a)) / (
        members * nonmembers
    )
    return float(np.sqrt(max(var, 0.0)))


def correct_class_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    demos: Sequence[Record],
    candidates: Sequence[Record],
) -> np.ndarray:
    """The attack's score: P(correct class) under the prompt with ``demos``."""
    probs = prompt_probabilities(model, tokenizer, task, demos, candidates, calibrated=False)
    truth = np.array([task.class_of(c) for c in candidates])
    scores: np.ndarray = probs[np.arange(len(candidates)), truth]
    return scores


@dataclass(frozen=True)
class MiaResult:
    auc: float  # pooled over every (member, non-member) pair
    mean_prompt_auc: float
    prompts: int
    members_per_prompt: int
    nonmembers_per_prompt: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompt_mia(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    pool: Sequence[Record],
    prompts: int = 100,
    nonmembers: int = 50,
    seed: int = 0,
    progress: bool = True,
) -> MiaResult:
    """AUC of the attack on random one-shot prompts drawn from ``pool`` (non-private)."""
    if len(pool) < nonmembers + 1:
        raise PrivlmError(f"the pool needs at least {nonmembers + 1} examples")
    rng = np.random.default_rng(seed)
    all_m: list[np.ndarray] = []
    all_n: list[np.ndarray] = []
    per: list[float] = []
    for _ in progress_bar(range(prompts), desc="prompt MIA", disable=not progress):
        pick = rng.choice(len(pool), size=nonmembers + 1, replace=False)
        member, others = pool[int(pick[0])], [pool[int(i)] for i in pick[1:]]
        scores = correct_class_scores(model, tokenizer, task, [member], [member, *others])
        all_m.append(scores[0])
        all_n.extend(scores[1:])
        per.append(auc(scores[:1], scores[1:]))
    return MiaResult(auc(all_m, all_n), float(np.mean(per)), prompts, 1, nonmembers)


def student_mia(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    student_demos: Sequence[Record],
    members: Sequence[Record],
    nonmembers: Sequence[Record],
) -> MiaResult:
    """The attack against a PromptPATE student: the private teacher demonstrations are the
    members; the student's prompt never contained them."""
    scores = correct_class_scores(model, tokenizer, task, student_demos, [*members, *nonmembers])
    m, n = scores[: len(members)], scores[len(members) :]
    return MiaResult(auc(m, n), auc(m, n), 1, len(members), len(nonmembers))
