"""PromptPATE's student: a one-shot (or k-shot) prompt chosen among candidates built from
the labelled public inputs, by accuracy on a held-back part of the labelled public set
(Flocks §4.2). Only public inputs and their private-but-already-paid-for labels are used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.progress import progress_bar
from privlm.prompting.evaluate import accuracy, prompt_probabilities
from privlm.prompting.tasks import Task


@dataclass(frozen=True)
class StudentPrompt:
    task: str
    # public inputs with their private labels: {"text", "label", and the template's fields}
    demos: tuple[dict[str, str], ...]
    holdout_accuracy: float
    candidates: int
    holdout: int

    def records(self) -> list[Record]:
        return [
            Record(
                d["text"],
                f"demo-{i}",
                d["label"],
                None,
                {k: v for k, v in d.items() if k not in ("text", "label")},
            )
            for i, d in enumerate(self.demos)
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def select_student(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    labelled: Sequence[Record],
    candidates: int = 20,
    shots: int = 1,
    holdout: int = 100,
    calibrated: bool = True,
    seed: int = 0,
    progress: bool = True,
) -> StudentPrompt:
    """The candidate prompt with the best accuracy on ``holdout`` held-back labelled inputs."""
    if holdout < 1 or len(labelled) < holdout + shots:
        raise PrivlmError(
            f"the student needs at least {holdout + shots} labelled public inputs "
            f"({holdout} held back), got {len(labelled)}; label more, or lower --holdout"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labelled))
    held = [labelled[int(i)] for i in order[:holdout]]
    pool = [labelled[int(i)] for i in order[holdout:]]
    best: tuple[float, list[Record]] | None = None
    n = min(candidates, len(pool) // shots)
    for c in progress_bar(range(n), desc="student candidates", disable=not progress):
        demos = pool[c * shots : (c + 1) * shots]
        acc = accuracy(
            prompt_probabilities(model, tokenizer, task, demos, held, calibrated), task, held
        )
        if best is None or acc > best[0]:
            best = (acc, demos)
    assert best is not None
    return StudentPrompt(
        task=task.name,
        demos=tuple(
            {
                "text": d.text,
                "label": str(d.label),
                **{f: d.fields[f] for f in task.extra_fields()},
            }
            for d in best[1]
        ),
        holdout_accuracy=best[0],
        candidates=n,
        holdout=holdout,
    )
