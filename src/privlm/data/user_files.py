"""Load a user's data file: ``.txt``, ``.jsonl`` or ``.csv``.

- ``.txt``: one record per line (``records="line"``) or per blank-line-separated block
  (``records="block"``).
- ``.jsonl`` / ``.csv``: a text column (default ``text``), with optional ``user_id`` and
  ``label`` columns, all renamable. With a user column the privacy unit is the user.
- A headerless ``.csv`` (``no_header=True``) names its columns by position, from 1.
- Any of them gzip-compressed (``.txt.gz``, ``.jsonl.gz``, ``.csv.gz``).

Every problem is a :class:`DataError` naming the file, the line and what is wrong: a
missing file, undecodable bytes, invalid JSON or CSV, a missing column, a record over the
size limit, no records at all. No error quotes a record's content, nor a header row's
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
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        # the offending bytes are not echoed: they may be private text
        raise DataError(path, f"undecodable bytes (not UTF-8) at byte {exc.start}", line) from None


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
    lines = content.splitlines()
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
    for i, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", i) from None
        if not isinstance(obj, dict):
            raise DataError(path, f"each line must be a JSON object, got {type(obj).__name__}", i)
        rows.append((i, obj))
    return rows


def _csv_rows(path: Path, content: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of every row, strictly: an unterminated quoted field, a quote
    inside an unquoted field or a NUL byte is refused with its line, never read as one long
    record (RFC 4180; Python's csv module in strict mode)."""
    if "\x00" in content:
        line = content[: content.index("\x00")].count("\n") + 1
        raise DataError(path, "a NUL byte in a CSV file (is it binary?)", line)
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
        raise DataError(path, "no header row (a .csv needs column names, or --no-header)")
    return rows


def _tabular(
    path: Path,
    rows: list[tuple[int, dict[str, Any]]],
    text_column: str,
    unit_column: str,
    label_column: str,
    limit: int,
) -> Dataset:
    if not rows:
        raise DataError(path, "no records (the file has no data rows)")
    present = set().union(*(r.keys() for _, r in rows))
    if text_column not in present:
        # the column names are not quoted: in a file without a header they are a record
        raise DataError(
            path,
            f"no {text_column!r} column among the file's {len(present)} columns; name the "
            "text column with --text-column NAME, or, if the first row is data, use "
            "--no-header with --text-column N (its position, from 1)",
        )
    by_user = unit_column in present
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
        extra = {
            k: str(v) for k, v in row.items() if k not in (text_column, unit_column, label_column)
        }
        out.append(Record(text, unit, None if label in (None, "") else str(label), line, extra))
    return Dataset(out, str(path), "user" if by_user else "record", skipped)


def load_file(
    path: str | Path,
    *,
    text_column: str = "text",
    unit_column: str = "user_id",
    label_column: str = "label",
    records: str = "line",
    max_record_chars: int = MAX_RECORD_CHARS,
    no_header: bool = False,
) -> Dataset:
    """Load ``path`` into a :class:`Dataset`; raise :class:`DataError` on any problem."""
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
        ds = _tabular(p, rows, text_column, unit_column, label_column, max_record_chars)
    else:
        rows = _rows_csv(p, content, no_header)
        ds = _tabular(p, rows, text_column, unit_column, label_column, max_record_chars)
    if not ds.records:
        raise DataError(p, "no records (the file is empty or every row was skipped)")
    return ds
