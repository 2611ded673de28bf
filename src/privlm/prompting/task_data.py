"""A task's private, public and test examples from the user's own files.

- **private** and **test** files are labelled: every record's label must be one of the
  task's labels;
- a **public** file is unlabelled (``.txt``, one input per line, will do) (an out-of-distribution set is fine): a label that is
  one of the task's is kept, for reporting the accuracy of released labels, any other
  value is dropped;
- every record must have every field the task's template uses.

Columns come from the task file's ``columns`` (default ``text``, ``label``, ``user_id`` and
each template field's own name), and the CLI's ``--text-column``/``--label-column``/
``--user-column`` override them. Every error names the file, the line and the field, never
a record's content (nor a label value, which may be a misplaced text column).

A role without a file is drawn from the task's bundled corpus, as :func:`task_splits` does;
a task without a corpus needs a file for every role the command uses.

    >>> from privlm.prompting.tasks import parse_task_text
    >>> task = parse_task_text('{"name": "t", "labels": ["a", "b"], "template": "{text}:"}', "t")
    >>> check_task_records([Record("hi", "record-0", "c", 3)], task, "my.csv", "private")
    Traceback (most recent call last):
    ...
    privlm.errors.DataError: my.csv:3: field 'label': the label is not one of task t's labels (a, b)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from privlm.data import Dataset, Record, load_file
from privlm.data.user_files import data_suffix
from privlm.errors import DataError, PrivlmError
from privlm.prompting.splits import TaskSplits, task_splits
from privlm.prompting.tasks import DEFAULT_COLUMNS, Task

ROLES = ("private", "public", "test")
LABELLED = ("private", "test")


@dataclass(frozen=True)
class ColumnOverrides:
    """The CLI's column options; ``None`` keeps the task file's choice."""

    text: str | None = None
    label: str | None = None
    user: str | None = None
    no_header: bool = False


@dataclass(frozen=True)
class TaskFiles:
    """The user's files for each role (``None``: drawn from the task's corpus)."""

    private: Path | None = None
    public: Path | None = None
    test: Path | None = None
    columns: ColumnOverrides = field(default_factory=ColumnOverrides)

    def path(self, role: str) -> Path | None:
        return {"private": self.private, "public": self.public, "test": self.test}[role]


def task_columns(task: Task, overrides: ColumnOverrides = ColumnOverrides()) -> dict[str, str]:
    """Field → column: text, label, user and every template field."""
    cols = {name: task.columns.get(name, name) for name in task.extra_fields()}
    cols.update({k: task.columns[k] for k in ("text", "label", "user")})
    for key in ("text", "label", "user"):
        given = getattr(overrides, key)
        if given is not None:
            cols[key] = given
    return cols


def check_task_records(
    records: list[Record], task: Task, source: str, role: str, label_column: str = "label"
) -> list[Record]:
    """``records`` checked against ``task`` for ``role``; a public record's label is kept
    only if it is one of the task's. Errors name ``source``, the line and the field."""
    if role not in ROLES:
        raise PrivlmError(f"role must be one of {ROLES}, not {role!r}")
    out = []
    for r in records:
        for name in task.extra_fields():
            if not r.fields.get(name, "").strip():
                raise DataError(
                    source,
                    f"field {name!r} is missing or empty; task {task.name}'s template uses "
                    f"{{{name}}}",
                    r.line,
                )
        if role in LABELLED:
            if r.label is None:
                raise DataError(
                    source, f"field {label_column!r} is missing or empty; {role} data is labelled",
                    r.line,
                )  # fmt: skip
            if r.label not in task.labels:
                raise DataError(
                    source,
                    f"field {label_column!r}: the label is not one of task {task.name}'s "
                    f"labels ({', '.join(task.labels)})",
                    r.line,
                )
            out.append(r)
        else:
            label = r.label if r.label in task.labels else None
            out.append(Record(r.text, r.unit, label, r.line, r.fields))
    return out


def load_task_records(
    path: str | Path, task: Task, role: str, columns: ColumnOverrides = ColumnOverrides()
) -> Dataset:
    """A data file's records for ``role`` of ``task`` (``.jsonl``/``.csv``, ``.gz`` too).
    The task file's column renames describe the private data (and test data like it); public
    inputs, often from elsewhere, may use them or the template's own field names."""
    cols = task_columns(task, columns)
    plain = task_columns(_without_renames(task), columns)
    if role == "public" and plain != cols:
        try:
            return _task_records(path, task, role, columns, cols)
        except DataError as renamed:
            try:
                return _task_records(path, task, role, columns, plain)
            except DataError:
                raise renamed from None
    return _task_records(path, task, role, columns, cols)


def _without_renames(task: Task) -> Task:
    return dataclasses.replace(task, columns=dict(DEFAULT_COLUMNS))


def _task_records(
    path: str | Path, task: Task, role: str, columns: ColumnOverrides, cols: dict[str, str]
) -> Dataset:
    if data_suffix(Path(path)) == ".txt" and (role != "public" or task.extra_fields()):
        raise DataError(
            path, f"{role} data for task {task.name} is a .jsonl or .csv file (a .txt file, one "
            "input per line, serves only as public data for a template with {text} alone)",
        )  # fmt: skip
    ds = load_file(
        path, text_column=cols["text"], unit_column=cols["user"], label_column=cols["label"],
        no_header=columns.no_header, require_named=False,
    )  # fmt: skip
    if role == "private" and columns.user is not None and ds.unit_kind != "user":
        raise DataError(
            path, f"no {columns.user!r} column for the user (named with --user-column): "
            "without it each record would be its own privacy unit",
        )  # fmt: skip
    renamed = [Record(r.text, r.unit, r.label, r.line, _template_fields(r, task, cols))
               for r in ds.records]  # fmt: skip
    records = check_task_records(renamed, task, ds.source, role, cols["label"])
    return Dataset(records, ds.source, ds.unit_kind, ds.skipped)


def _template_fields(record: Record, task: Task, cols: dict[str, str]) -> dict[str, str]:
    """The record's template fields under their template names."""
    return {name: record.fields[cols[name]] for name in task.extra_fields()
            if cols[name] in record.fields}  # fmt: skip


def _sample(
    records: list[Record], n: int | None, source: str, seed: int, role: str
) -> list[Record]:
    """``n`` of a file's records drawn by ``seed``; a private file is used whole."""
    if n is None or n == len(records):
        return records
    if role == "private":
        # which n records a seeded permutation picks depends on every record in the file,
        # so one unit more or less could change many picks: the guarantee, stated for the
        # file, would not hold at its ε
        raise DataError(
            source,
            f"asked for {n} of the private file's {len(records)} examples; privlm trains on "
            "a private file whole (a subset drawn from it would depend on every record, and "
            "the guarantee would not hold), so make a smaller file instead",
        )
    if n > len(records):
        raise DataError(source, f"asked for {n} examples, the file has {len(records)}")
    order = np.random.default_rng(seed).permutation(len(records))[:n]
    return [records[int(i)] for i in sorted(order)]


def task_data(
    task: Task,
    files: TaskFiles,
    counts: dict[str, int | None],
    defaults: dict[str, int],
    seed: int = 0,
    need: tuple[str, ...] = (),
) -> TaskSplits:
    """Private, public and test records. A role with a file takes all of it, or ``counts``
    of it drawn by ``seed`` (public and test only: a private file is used whole); a role
    without one takes ``counts`` (else ``defaults``) from
    the task's corpus. A role in ``need`` that gets nothing is an error; without a corpus
    and a file, any other role is left empty."""
    got: dict[str, list[Record]] = {}
    from_corpus: dict[str, int] = {}
    for role in ROLES:
        path = files.path(role)
        if path is not None:
            ds = load_task_records(path, task, role, files.columns)
            got[role] = _sample(ds.records, counts.get(role), ds.source, seed, role)
        else:
            n = counts.get(role)
            from_corpus[role] = defaults.get(role, 0) if n is None else n
    if task.corpus is None:
        for role in ROLES:
            if role in need and role in from_corpus:
                kind = "an unlabelled" if role == "public" else "a labelled"
                raise PrivlmError(
                    f"task {task.name} ships no data: give --{role}-data FILE ({kind} "
                    ".jsonl or .csv)"
                )
        from_corpus = dict.fromkeys(from_corpus, 0)
    if any(from_corpus.values()):
        drawn = task_splits(task, from_corpus.get("private", 0), from_corpus.get("public", 0),
                            from_corpus.get("test", 0), seed)  # fmt: skip
        got.update({r: getattr(drawn, r) for r in from_corpus})
    splits = TaskSplits(*(got.get(role, []) for role in ROLES))
    empty = [role for role in need if not getattr(splits, role)]
    if empty:
        raise PrivlmError(f"no {empty[0]} examples: give --{empty[0]}-data FILE or a count above 0")
    return splits
