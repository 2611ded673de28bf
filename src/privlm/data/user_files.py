"""Load a user's data file: ``.txt``, ``.jsonl`` or ``.csv``.

- ``.txt``: one record per line (``records="line"``) or per blank-line-separated block
  (``records="block"``).
- ``.jsonl`` / ``.csv``: a text column (default ``text``), with optional ``user_id`` and
  ``label`` columns, all renamable. With a user column the privacy unit is the user.
- A headerless ``.csv`` (``no_header=True``) names its columns by position, from 1.
- Any of them gzip-compressed (``.txt.gz``, ``.jsonl.gz``, ``.csv.gz``).

Records are separated by ``\n`` or ``\r\n`` only: a form feed, a vertical tab, U+2028 or
U+0085 inside a line is text, never a new record (and a new privacy unit).

Every problem is a :class:`DataError` naming the file, the line and what is wrong: a
missing file, undecodable bytes, a NUL byte (raw or escaped as ``\u0000``), a lone
surrogate escape, invalid JSON (NaN and Infinity included, or nested deeper than
``MAX_JSON_DEPTH``) or CSV, a duplicated CSV column, a label that is
neither a string nor an integer (or a file mixing the two), a user id that is neither, a
missing column, a record over the size limit, no records at all. No error quotes a record's content, nor a header row's
(which, in a file without one, is a record). Rows with empty text are skipped, counted and reported,
never dropped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from privlm.data.records import Dataset, Record, Skip
from privlm.errors import DataError

MAX_RECORD_CHARS = 200_000
MAX_JSON_DEPTH = 64  # nesting of a JSONL line's arrays and objects
SUFFIXES = (".txt", ".jsonl", ".csv")


def data_suffix(path: Path) -> str:
    """``.csv`` for ``notes.csv`` and ``notes.csv.gz`` alike."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _read_text(path: Path) -> str:
    if not path.exists():
        raise DataError(path, "file not found")
    if not path.is_file():
        raise DataError(path, "not a regular file")
    raw = path.read_bytes()
    if path.suffix.lower() == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(path, f"not a valid gzip file ({type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        # the offending bytes are not echoed: they may be private text
        raise DataError(path, f"undecodable bytes (not UTF-8) at byte {exc.start}", line) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise DataError(path, "a NUL byte (is the file binary?)", line)
    return text


def lines_of(content: str) -> list[str]:
    """The lines of ``content``, split at ``\n`` and ``\r\n`` only (``str.splitlines`` would
    split at form feeds, U+2028 and five more, making one line several records)."""
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _check_size(path: Path, line: int, text: str, limit: int) -> None:
    if len(text) > limit:
        raise DataError(
            path, f"record of {len(text):,} characters exceeds the limit of {limit:,}", line
        )


def _txt(path: Path, content: str, records: str, limit: int) -> Dataset:
    if records not in ("line", "block"):
        raise DataError(path, f"records must be 'line' or 'block', got {records!r}")
    out: list[Record] = []
    skipped: list[Skip] = []
    lines = lines_of(content)
    if records == "line":
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                skipped.append(Skip(i, "blank line"))
                continue
            _check_size(path, i, line, limit)
            out.append(Record(line, f"record-{len(out)}", line=i))
    else:
        block: list[str] = []
        start = 0
        for i, line in enumerate([*lines, ""], start=1):
            if line.strip():
                if not block:
                    start = i
                block.append(line)
            elif block:
                text = "\n".join(block)
                _check_size(path, start, text, limit)
                out.append(Record(text, f"record-{len(out)}", line=start))
                block = []
    return Dataset(out, str(path), "record", skipped)


def jsonl_rows(path: Path, content: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank JSON line; errors name the file and line."""
    rows = []
    for i, line in enumerate(lines_of(content), start=1):
        if not line.strip():
            continue
        if json_depth(line) > MAX_JSON_DEPTH:
            raise DataError(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels", i)
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", i) from None
        except ValueError as exc:
            raise DataError(path, f"invalid JSON: {exc}", i) from None
        if not isinstance(obj, dict):
            raise DataError(path, f"each line must be a JSON object, got {type(obj).__name__}", i)
        if "\\u" in line:  # only an escape can make a NUL or a lone surrogate
            problem = escaped_problem(obj)
            if problem:
                raise DataError(path, problem, i)
        rows.append((i, obj))
    return rows


def escaped_problem(value: Any) -> str | None:
    """What is wrong with a parsed JSON value's strings (keys included), or None: an
    escaped NUL (``\\u0000``), which a file may not hold raw either, or a lone surrogate
    (``\\ud800``), which is no Unicode text. Never quotes the content."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "an escaped NUL (\\u0000) in a string"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a lone surrogate escape (e.g. \\ud800) in a string: not Unicode text"
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def json_depth(line: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings
    ignored), found without parsing, so a deep line cannot exhaust the parser's stack."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in line:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _csv_rows(path: Path, content: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of every row, strictly: an unterminated quoted field or a quote
    inside an unquoted field is refused with its line, never read as one long record
    (RFC 4180; Python's csv module in strict mode)."""
    reader = csv.reader(io.StringIO(content, newline=""), strict=True)
    first = 1
    try:
        for row in reader:
            yield first, row
            first = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(path, f"malformed CSV in the row starting here: {exc}", first) from None


def _rows_csv(path: Path, content: str, no_header: bool) -> list[tuple[int, dict[str, Any]]]:
    """Rows as {column: value}; every row has exactly as many fields as the header (or, with
    ``no_header``, as the first row, its columns named "1", "2", … by position)."""
    rows: list[tuple[int, dict[str, Any]]] = []
    names: list[str] | None = None
    for line, fields in _csv_rows(path, content):
        if not fields:
            continue  # a blank line
        if names is None:
            if no_header:
                names = [str(i) for i in range(1, len(fields) + 1)]
            else:
                names = fields
                _check_header(path, names, line)
                continue
        if len(fields) != len(names):
            n, m = len(fields), len(names)
            where = "the first row has" if no_header else "the header has"
            raise DataError(
                path,
                f"{n} field{'s' * (n != 1)}, {'more' if n > m else 'fewer'} than the {m} "
                f"column{'s' * (m != 1)} {where}",
                line,
            )
        rows.append((line, dict(zip(names, fields, strict=True))))
    if names is None and not no_header:
        raise DataError(
            path, "no header row (a .csv needs column names)", cli_hint="or use --no-header"
        )
    return rows


def _check_header(path: Path, names: list[str], line: int) -> None:
    """A column named twice would keep one of its values silently: refused."""
    seen: set[str] = set()
    for n, name in enumerate(names, start=1):
        if name in seen:
            raise DataError(path, f"column {n} repeats an earlier column's name", line)
        seen.add(name)


def _scalar(path: Path, value: Any, what: str, line: int) -> str | int:
    """A label or user id: a string or an integer (not a boolean, float, object or list)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(
            path, f"the {what} must be a string or an integer, got {type(value).__name__}", line
        )
    return value


def _tabular(
    path: Path,
    rows: list[tuple[int, dict[str, Any]]],
    text_column: str,
    unit_column: str,
    label_column: str,
    limit: int,
    require_named: bool = True,
) -> Dataset:
    if not rows:
        raise DataError(path, "no records (the file has no data rows)")
    present = set().union(*(r.keys() for _, r in rows))
    if text_column not in present:
        # the column names are not quoted: in a file without a header they are a record
        raise DataError(
            path,
            f"no {text_column!r} column among the file's {len(present)} columns",
            cli_hint="name the text column with --text-column NAME, or, if the first row is "
            "data, use --no-header with --text-column N (its position, from 1)",
        )
    if require_named:
        _check_named_columns(path, present, unit_column, label_column)
    by_user = unit_column in present
    label_kinds: dict[type, int] = {}
    out: list[Record] = []
    skipped: list[Skip] = []
    for line, row in rows:
        if text_column not in row:
            raise DataError(path, f"missing the {text_column!r} field", line)
        text = row[text_column]
        if text is None or (isinstance(text, str) and not text.strip()):
            skipped.append(Skip(line, f"empty {text_column!r}"))
            continue
        if not isinstance(text, str):
            raise DataError(
                path, f"{text_column!r} must be a string, got {type(text).__name__}", line
            )
        _check_size(path, line, text, limit)
        if by_user:
            user = row.get(unit_column)
            if user is not None:
                user = _scalar(path, user, "user id", line)
            if user is None or str(user).strip() == "":
                raise DataError(
                    path,
                    f"empty {unit_column!r}: with a {unit_column!r} column every record needs "
                    "one, or its privacy unit would be ambiguous",
                    line,
                )
            unit = f"user-{user}"
        else:
            unit = f"record-{len(out)}"
        label = row.get(label_column)
        if label is not None and label != "":
            label = _scalar(path, label, "label", line)
            first = label_kinds.setdefault(type(label), line)
            if len(label_kinds) > 1:
                other = min(v for k, v in label_kinds.items() if k is not type(label))
                raise DataError(
                    path,
                    'labels mix strings and integers (1 and "1" would become one label); use '
                    f"one type per file (line {other} has the other type)",
                    first,
                )
        extra = {
            k: str(v) for k, v in row.items() if k not in (text_column, unit_column, label_column)
        }
        out.append(Record(text, unit, None if label in (None, "") else str(label), line, extra))
    return Dataset(out, str(path), "user" if by_user else "record", skipped)


DEFAULT_UNIT_COLUMN, DEFAULT_LABEL_COLUMN = "user_id", "label"


def _check_named_columns(
    path: Path, present: set[str], unit_column: str, label_column: str
) -> None:
    """A user or label column named other than its default must exist: a misspelt user
    column would silently make each record its own unit, a misspelt label column every
    record unlabelled. (The defaults are optional: a file may have neither.)"""
    for column, default, what in (
        (unit_column, DEFAULT_UNIT_COLUMN, "user"), (label_column, DEFAULT_LABEL_COLUMN, "label"),
    ):  # fmt: skip
        if column != default and column not in present:
            found = ", ".join(repr(c) for c in sorted(present)[:12])
            raise DataError(
                path, f"no {column!r} column for the {what}; the file's columns are {found}"
            )


def load_file(
    path: str | Path,
    *,
    text_column: str = "text",
    unit_column: str = DEFAULT_UNIT_COLUMN,
    label_column: str = DEFAULT_LABEL_COLUMN,
    records: str = "line",
    max_record_chars: int = MAX_RECORD_CHARS,
    no_header: bool = False,
    require_named: bool = True,
) -> Dataset:
    """Load ``path`` into a :class:`Dataset`; raise :class:`DataError` on any problem.
    ``require_named``: a user or label column named other than its default must exist (off
    for files that need neither, such as a task's public inputs)."""
    p = Path(path).expanduser()
    suffix = data_suffix(p)
    if suffix not in SUFFIXES:
        raise DataError(
            p, f"unsupported file type {suffix or '(none)'!r}; use one of {SUFFIXES} (or .gz)"
        )
    if no_header and suffix != ".csv":
        raise DataError(p, "--no-header is for .csv files")
    content = _read_text(p)
    if suffix == ".txt":
        ds = _txt(p, content, records, max_record_chars)
    elif suffix == ".jsonl":
        rows = jsonl_rows(p, content)
        ds = _tabular(
            p, rows, text_column, unit_column, label_column, max_record_chars, require_named
        )
    else:
        rows = _rows_csv(p, content, no_header)
        ds = _tabular(
            p, rows, text_column, unit_column, label_column, max_record_chars, require_named
        )
    if not ds.records:
        raise DataError(p, "no records (the file is empty or every row was skipped)")
    return ds
