"""Classification tasks as prompts, from task files (YAML or JSON).

A task file names the labels, the verbaliser each label is answered with, and a template
with ``{text}`` and any other ``{field}`` placeholders, ending where the answer goes::

    name: ticket-topic
    labels: {billing: Billing, outage: Outage, account: Account}   # label: verbaliser
    template: "Ticket: {text}\\nTopic:"
    columns: {text: body, label: topic, user: customer}            # optional

``labels`` may also be a list, with ``verbalizers`` a list of the same length. ``columns``
says which fields of a data file hold the text, the label, the user id (default ``text``,
``label``, ``user_id``) and any other template field (default: its own name); in a
headerless CSV they are positions, from 1. ``privlm.prompting.task_data`` loads such files. A bundled task also names its ``corpus`` and ``splits``.

The five bundled tasks (SST-2, AG News, TREC, CB, RTE, with the templates and verbalisers of
Calibrate Before Use, Zhao et al. 2021, Table 14, as the Flocks paper uses them) are task
files shipped in ``privlm/prompting/task_files``; ``get_task(NAME)`` loads them.

A record becomes ``task.template(record)``; a demonstration is the same text followed by its
verbalised label. Each class is scored by the first token of " <verbaliser>", which must
differ between classes (``label_token_ids``). Every error names the file and the field.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privlm.data import Dataset, Record, corpora
from privlm.errors import DataError, PrivlmError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

CONTENT_FREE = ("N/A", "", "[MASK]")  # Zhao et al. 2021's content-free inputs

TASK_FILES = "task_files"
DEFAULT_COLUMNS = {"text": "text", "label": "label", "user": "user_id"}
CORPORA = {"sst2": corpora.sst2, "agnews": corpora.agnews, "trec": corpora.trec,
           "cb": corpora.cb, "rte": corpora.rte}  # fmt: skip


@dataclass(frozen=True)
class Task:
    name: str
    labels: tuple[str, ...]  # the data's label values, in class order
    verbalizers: tuple[str, ...]  # the word each class is answered with
    template_text: str  # "{text}" and other "{field}" placeholders
    source: str = "(built in Python)"  # the task file, for errors
    columns: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COLUMNS))
    corpus: str | None = None  # a bundled corpus (privlm.data.corpora), if any
    splits: tuple[str, str] = ("train", "test")  # of the corpus: (private/public, test)

    def __post_init__(self) -> None:
        if len(self.labels) < 2:
            raise DataError(self.source, "field 'labels': a task needs at least two labels")
        if len(set(self.labels)) != len(self.labels):
            raise DataError(self.source, "field 'labels': a label is listed twice")
        if len(self.verbalizers) != len(self.labels):
            raise DataError(
                self.source,
                f"field 'verbalizers': {len(self.labels)} labels but "
                f"{len(self.verbalizers)} verbalisers",
            )
        if any(not str(v).strip() for v in self.verbalizers):
            raise DataError(self.source, "field 'verbalizers': a verbaliser is empty")
        if "text" not in self.placeholders():
            raise DataError(self.source, "field 'template': it has no {text} placeholder")

    def placeholders(self) -> list[str]:
        """The template's ``{field}`` names, ``text`` included."""
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(self.template_text) if f]
        except ValueError as exc:
            raise DataError(self.source, f"field 'template': {exc}") from None
        for name in names:
            if not name.isidentifier():
                raise DataError(
                    self.source, f"field 'template': {{{name}}} is not a plain field name"
                )
        return list(dict.fromkeys(names))

    def extra_fields(self) -> list[str]:
        """The fields a record needs besides its text."""
        return [f for f in self.placeholders() if f != "text"]

    def template(self, record: Record) -> str:
        values = {"text": record.text}
        for name in self.extra_fields():
            if name not in record.fields:
                where = f" (line {record.line})" if record.line else ""
                raise PrivlmError(
                    f"a record{where} has no {name!r} field, which task {self.name}'s template uses"
                )
            values[name] = record.fields[name]
        return self.template_text.format(**values)

    def class_of(self, record: Record) -> int:
        if record.label not in self.labels:
            where = f" on line {record.line}" if record.line else ""
            raise PrivlmError(
                f"the label{where} is not one of task {self.name}'s labels "
                f"({', '.join(self.labels)})"
            )
        return self.labels.index(record.label)

    def demonstration(self, record: Record) -> str:
        return f"{self.template(record)} {self.verbalizers[self.class_of(record)]}"

    def load(self, split: str) -> Dataset:
        """A split of the task's bundled corpus."""
        if self.corpus is None:
            raise PrivlmError(
                f"task {self.name} ships no data: give --private-data (and --public-data, "
                "--test-data) files"
            )
        return CORPORA[self.corpus](split)

    def to_spec(self) -> dict[str, Any]:
        """The task as a task file's content (what the service stores with a job)."""
        spec: dict[str, Any] = {
            "name": self.name,
            "labels": dict(zip(self.labels, self.verbalizers, strict=True)),
            "template": self.template_text,
            "columns": self.columns,
        }
        if self.corpus is not None:
            spec.update(corpus=self.corpus, splits=list(self.splits))
        return spec


@dataclass(frozen=True)
class TaskExamples:
    """A task and its labelled private examples: the data PromptDPSGD trains on."""

    task: Task
    records: list[Record]


@dataclass(frozen=True)
class PateExamples:
    """PromptPATE's data: a task, its labelled private examples (the teachers' shots) and
    the unlabelled public inputs the teachers label (released verbatim in the student)."""

    task: Task
    private: list[Record]
    public: list[Record]


def task_from_spec(spec: Any, source: str) -> Task:
    """A :class:`Task` from a task file's parsed content; errors name ``source`` and the field."""
    if not isinstance(spec, dict):
        raise DataError(source, "a task file must hold a mapping (name, labels, template)")
    unknown = sorted(set(spec) - {"name", "labels", "verbalizers", "template", "columns",
                                  "corpus", "splits", "description"})  # fmt: skip
    if unknown:
        raise DataError(source, f"unknown field(s) {', '.join(map(repr, unknown))}")
    for key in ("name", "labels", "template"):
        if key not in spec:
            raise DataError(source, f"field {key!r} is missing")
    if not isinstance(spec["name"], str) or not spec["name"].strip():
        raise DataError(source, "field 'name': must be a non-empty string")
    if not isinstance(spec["template"], str):
        raise DataError(source, "field 'template': must be a string")
    labels, verbalizers = _labels(spec, source)
    columns = dict(DEFAULT_COLUMNS)
    given = spec.get("columns") or {}
    if not isinstance(given, dict):
        raise DataError(
            source,
            "field 'columns': a mapping from text, label, user (and the "
            "template's other fields) to the data file's column names",
        )
    columns.update({str(k): str(v) for k, v in given.items()})
    corpus = spec.get("corpus")
    if corpus is not None and corpus not in CORPORA:
        raise DataError(source, f"field 'corpus': {corpus!r} is not one of {sorted(CORPORA)}")
    splits = tuple(spec.get("splits", ("train", "test")))
    if len(splits) != 2:
        raise DataError(source, "field 'splits': two split names (private/public, test)")
    task = Task(
        spec["name"].strip(), labels, verbalizers, spec["template"], source, columns, corpus,
        (str(splits[0]), str(splits[1])),
    )  # fmt: skip
    known = {*DEFAULT_COLUMNS, *task.extra_fields()}
    stray = sorted(set(columns) - known)
    if stray:
        raise DataError(
            source,
            f"field 'columns': {', '.join(map(repr, stray))} is neither text, label, user nor "
            "a field of the template",
        )
    return task


def _labels(spec: dict[str, Any], source: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    raw = spec["labels"]
    if isinstance(raw, dict):
        if "verbalizers" in spec:
            raise DataError(source, "field 'verbalizers': not with a labels mapping")
        return tuple(str(k) for k in raw), tuple(str(v) for v in raw.values())
    if isinstance(raw, list) and "verbalizers" in spec:
        if not isinstance(spec["verbalizers"], list):
            raise DataError(source, "field 'verbalizers': must be a list")
        return tuple(str(x) for x in raw), tuple(str(x) for x in spec["verbalizers"])
    if isinstance(raw, list):
        return tuple(str(x) for x in raw), tuple(str(x) for x in raw)  # the labels themselves
    raise DataError(source, "field 'labels': a mapping label → verbaliser, or a list")


def parse_task_text(text: str, source: str) -> Task:
    """A task file's text (YAML, of which JSON is a subset)."""
    import yaml

    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or "parse error"
        raise DataError(source, f"not valid YAML or JSON: {problem}", line) from None
    return task_from_spec(spec, source)


def load_task_file(path: str | Path) -> Task:
    """A task from a ``.yaml``, ``.yml`` or ``.json`` file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(p, "task file not found")
    if p.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise DataError(p, "a task file is .yaml, .yml or .json")
    if p.suffix.lower() == ".json":
        try:
            return task_from_spec(json.loads(p.read_text()), str(p))
        except json.JSONDecodeError as exc:
            raise DataError(p, f"invalid JSON: {exc.msg}", exc.lineno) from None
    return parse_task_text(p.read_text(), str(p))


def _bundled_tasks() -> dict[str, Task]:
    """The task files shipped in ``privlm/prompting/task_files``, parsed once at import."""
    files = resources.files("privlm.prompting").joinpath(TASK_FILES)
    return {
        f.name.rsplit(".", 1)[0]: parse_task_text(
            f.read_text(), f"privlm/prompting/{TASK_FILES}/{f.name}"
        )
        for f in sorted(files.iterdir(), key=lambda f: f.name)
        if f.name.endswith(".yaml")
    }


TASKS: dict[str, Task] = _bundled_tasks()


def get_task(name: str) -> Task:
    """A bundled task by name."""
    try:
        return TASKS[name]
    except KeyError:
        raise PrivlmError(f"unknown task {name!r}; choose from {sorted(TASKS)}") from None


def label_token_ids(task: Task, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The first token of " <verbaliser>" for each class; refused, naming the two
    verbalisers and the task file, if two classes share it."""
    ids = []
    for v in task.verbalizers:
        tokens = tokenizer(" " + v, add_special_tokens=False)["input_ids"]
        if not tokens:
            raise DataError(task.source, f"field 'labels': verbaliser {v!r} has no tokens")
        ids.append(tokens[0])
    for i in range(len(ids)):
        for j in range(i):
            if ids[i] == ids[j]:
                raise DataError(
                    task.source,
                    f"field 'labels': verbalisers {task.verbalizers[j]!r} and "
                    f"{task.verbalizers[i]!r} start with the same token under this tokenizer, "
                    "so the two classes could not be told apart; choose words that differ "
                    "in their first token",
                )
    return ids


def content_free_records(task: Task) -> list[Record]:
    """Zhao et al.'s content-free inputs for contextual calibration, every field of the
    template filled with the same content-free string."""
    return [
        Record(c, "content-free", None, None, {f: c for f in task.extra_fields()})
        for c in CONTENT_FREE
    ]


def build_prompt(task: Task, demos: list[Record], query: Record) -> str:
    """k-shot prompt: the demonstrations with their answers, then the query's template."""
    parts = [task.demonstration(d) for d in demos]
    parts.append(task.template(query))
    return "\n\n".join(parts)
