"""Disjoint private / public / test records for a task.

Private and public examples come from the task's training split (AG News, staged as its test
set only, is carved into three disjoint parts); public inputs lose their labels before any
teacher sees them, and keep them only for reporting label accuracy. Test examples come from
the test split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privlm.data import Record
from privlm.errors import PrivlmError
from privlm.prompting.tasks import Task


@dataclass(frozen=True)
class TaskSplits:
    private: list[Record]
    public: list[Record]
    test: list[Record]


def task_splits(task: Task, private: int, public: int, test: int, seed: int = 0) -> TaskSplits:
    rng = np.random.default_rng(seed)
    train = task.load(task.splits[0]).records
    same = task.splits[0] == task.splits[1]
    need = private + public + (test if same else 0)
    if need > len(train):
        raise PrivlmError(f"{task.name}: asked for {need} examples, the split has {len(train)}")
    order = rng.permutation(len(train))
    pick = [train[int(i)] for i in order[:need]]
    priv, pub = pick[:private], pick[private : private + public]
    if same:
        tst = pick[private + public :]
    else:
        pool = task.load(task.splits[1]).records
        tst = [pool[int(i)] for i in rng.permutation(len(pool))[: min(test, len(pool))]]
    return TaskSplits(priv, pub, tst)
