"""Classification tasks as prompts: templates and verbalizers (Calibrate Before Use, Zhao et
al. 2021, Table 14, as the Flocks paper uses them) for SST-2, AG News, TREC, CB and RTE.

A record becomes ``template(record)``, ending where the answer goes; a demonstration is the
same text followed by its verbalized label. Each class is scored by the first token of
" <verbalizer>", which must differ between classes (checked by ``label_token_ids``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from privlm.data import Dataset, Record, corpora
from privlm.errors import PrivlmError


@dataclass(frozen=True)
class Task:
    name: str
    labels: tuple[str, ...]  # the dataset's label names, in class order
    verbalizers: tuple[str, ...]  # the word each class is answered with
    template: Callable[[Record], str]  # the record up to where the answer goes
    load: Callable[[str], Dataset]
    splits: tuple[str, str]  # (the split private and public data come from, the test split)

    def class_of(self, record: Record) -> int:
        if record.label not in self.labels:
            raise PrivlmError(f"{self.name}: unknown label {record.label!r}; known {self.labels}")
        return self.labels.index(record.label)

    def demonstration(self, record: Record) -> str:
        return f"{self.template(record)} {self.verbalizers[self.class_of(record)]}"


def _hyp(r: Record) -> str:
    return r.fields.get("hypothesis", "")


TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task(
            "sst2", ("negative", "positive"), ("Negative", "Positive"),
            lambda r: f"Review: {r.text}\nSentiment:", corpora.sst2, ("train", "test"),
        ),
        Task(
            "agnews", ("World", "Sports", "Business", "Sci/Tech"),
            ("World", "Sports", "Business", "Technology"),
            lambda r: f"Article: {r.text}\nAnswer:", corpora.agnews, ("test", "test"),
        ),
        Task(
            "trec", ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"),
            ("Abbreviation", "Description", "Entity", "Person", "Location", "Number"),
            lambda r: f"Question: {r.text}\nAnswer Type:", corpora.trec, ("train", "test"),
        ),
        Task(
            "cb", ("contradiction", "entailment", "neutral"), ("false", "true", "neither"),
            lambda r: f"{r.text}\nquestion: {_hyp(r)}. true, false, or neither?\nanswer:",
            corpora.cb, ("train", "val"),
        ),
        Task(
            "rte", ("not_entailment", "entailment"), ("False", "True"),
            lambda r: f"{r.text}\nquestion: {_hyp(r)} True or False?\nanswer:",
            corpora.rte, ("train", "val"),
        ),
    ]
}  # fmt: skip


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise PrivlmError(f"unknown task {name!r}; choose from {sorted(TASKS)}") from None


def label_token_ids(task: Task, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The first token of " <verbalizer>" for each class; refused if two classes share it."""
    ids = [tokenizer(" " + v, add_special_tokens=False)["input_ids"][0] for v in task.verbalizers]
    if len(set(ids)) != len(ids):
        raise PrivlmError(
            f"{task.name}: two verbalizers start with the same token under this tokenizer"
        )
    return ids


def build_prompt(task: Task, demos: list[Record], query: Record) -> str:
    """k-shot prompt: the demonstrations with their answers, then the query's template."""
    parts = [task.demonstration(d) for d in demos]
    parts.append(task.template(query))
    return "\n\n".join(parts)
