"""Accuracy of k-shot prompts: scored over the label tokens, optionally calibrated."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privlm.data import Record
from privlm.prompting.scoring import calibrate, label_probabilities
from privlm.prompting.tasks import Task, build_prompt, content_free_records, label_token_ids


def prompt_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    demos: Sequence[Record],
    queries: Sequence[Record],
    calibrated: bool = True,
    batch_size: int = 16,
) -> NDArray[np.float64]:
    """(len(queries), classes) class probabilities under the prompt with ``demos``."""
    ids = label_token_ids(task, tokenizer)
    prompts = [build_prompt(task, list(demos), q) for q in queries]
    probs = label_probabilities(model, tokenizer, prompts, ids, batch_size)
    if calibrated:
        free = [build_prompt(task, list(demos), r) for r in content_free_records(task)]
        probs = calibrate(probs, label_probabilities(model, tokenizer, free, ids, batch_size))
    return probs


def accuracy(probs: NDArray[np.float64], task: Task, queries: Sequence[Record]) -> float:
    truth = np.array([task.class_of(q) for q in queries])
    return float(np.mean(probs.argmax(-1) == truth))
