"""User files: formats, privacy units, and errors that name the file, the line and the problem."""

from __future__ import annotations

import json

import pytest

from privlm.data import load_file
from privlm.errors import DataError

pytestmark = pytest.mark.fast


def write(tmp_path, name, content, mode="w"):
    p = tmp_path / name
    if mode == "wb":
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8")
    return p


def test_txt_lines_skip_blank_lines_and_report_them(tmp_path):
    ds = load_file(write(tmp_path, "a.txt", "first\n\nsecond\n   \nthird\n"))
    assert ds.texts() == ["first", "second", "third"]
    assert [r.line for r in ds] == [1, 3, 5]
    assert ds.unit_kind == "record" and len(ds.units()) == 3
    assert [(s.line, s.reason) for s in ds.skipped] == [(2, "blank line"), (4, "blank line")]
    assert ds.summary()["skipped"] == 2


def test_txt_blocks(tmp_path):
    ds = load_file(write(tmp_path, "b.txt", "a1\na2\n\n\nb1\n\nc1\nc2\nc3"), records="block")
    assert ds.texts() == ["a1\na2", "b1", "c1\nc2\nc3"]
    assert [r.line for r in ds] == [1, 5, 7]


def test_jsonl_with_users_and_labels(tmp_path):
    rows = [
        {"text": "hello", "user_id": "u1", "label": "pos"},
        {"text": "again", "user_id": "u1", "label": "neg"},
        {"text": "", "user_id": "u2"},
        {"text": "other", "user_id": 7},
    ]
    ds = load_file(write(tmp_path, "d.jsonl", "\n".join(json.dumps(r) for r in rows)))
    assert ds.unit_kind == "user"
    assert [r.unit for r in ds] == ["user-u1", "user-u1", "user-7"]
    assert ds.units() == ["user-u1", "user-7"]
    assert [r.label for r in ds] == ["pos", "neg", None]
    assert [(s.line, s.reason) for s in ds.skipped] == [(3, "empty 'text'")]


def test_csv_with_custom_text_column(tmp_path):
    p = write(tmp_path, "d.csv", 'body,label\n"hello, world",a\nsecond,b\n')
    ds = load_file(p, text_column="body")
    assert ds.texts() == ["hello, world", "second"]
    assert [r.line for r in ds] == [2, 3]
    assert ds.unit_kind == "record"


@pytest.mark.parametrize(
    ("name", "content", "pattern", "line"),
    [
        ("empty.txt", "", "no records", None),
        ("blank.txt", "\n\n  \n", "no records", None),
        ("nocol.csv", "body,label\nx,y\n", r"no 'text' column among the file's 2 columns", None),
        ("nocol.jsonl", '{"body": "x"}\n', r"no 'text' column", None),
        ("badjson.jsonl", '{"text": "ok"}\n{"text": \n', "invalid JSON", 2),
        ("notobj.jsonl", '{"text": "ok"}\n["x"]\n', "JSON object", 2),
        ("extra.csv", "text\nok\na,b\n", "2 fields, more than the 1 column the header has", 3),
        ("ragged.csv", "text,user_id\na,u1\nb\n", "1 field, fewer than the 2 columns", 3),
        ("unterminated.csv", 'text,user_id\n"first note,u1\nsecond,u2\n', "malformed CSV", 2),
        ("quote.csv", 'text,user_id\na,u1\n"b" x,u2\n', "malformed CSV", 3),
        ("nul.csv", "text,user_id\na,u1\nb\x00c,u2\n", "a NUL byte", 3),
        ("onlyheader.csv", "text\n", "no data rows", None),
        ("nonstr.jsonl", '{"text": 5}\n', "must be a string", 1),
        (
            "nouser.jsonl",
            '{"text": "a", "user_id": "u"}\n{"text": "b", "user_id": ""}\n',
            "empty 'user_id'",
            2,
        ),
        ("data.parquet", "x", "unsupported file type", None),
    ],
)
def test_bad_files_name_file_line_and_problem(tmp_path, name, content, pattern, line):
    p = write(tmp_path, name, content)
    with pytest.raises(DataError, match=pattern) as err:
        load_file(p)
    assert err.value.path == str(p)
    assert err.value.line == line
    assert str(err.value).startswith(str(p) if line is None else f"{p}:{line}:")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_file(tmp_path / "nope.txt")


def test_undecodable_bytes_name_the_line(tmp_path):
    p = write(tmp_path, "latin.txt", b"fine\nalso fine\ncaf\xe9\n", mode="wb")
    with pytest.raises(DataError, match="undecodable bytes") as err:
        load_file(p)
    assert err.value.line == 3


def test_oversized_record(tmp_path):
    p = write(tmp_path, "big.txt", "short\n" + "x" * 101 + "\n")
    with pytest.raises(DataError, match="101 characters exceeds the limit of 100") as err:
        load_file(p, max_record_chars=100)
    assert err.value.line == 2


def test_utf8_bom_is_accepted(tmp_path):
    p = write(tmp_path, "bom.csv", "\ufefftext\nhello\n")
    assert load_file(p).texts() == ["hello"]


def test_a_missing_column_never_quotes_the_header_row(tmp_path):
    """In a file without a header the 'header' is a private record."""
    p = tmp_path / "h.csv"
    p.write_text("Alice Smith called about card 4111,billing\nBob,outage\n")
    with pytest.raises(DataError) as err:
        load_file(p)
    assert "Alice" not in str(err.value) and "--no-header" in str(err.value)


def test_headerless_and_gzipped_files(tmp_path):
    import gzip

    p = tmp_path / "d.csv.gz"
    p.write_bytes(
        gzip.compress(b"u1,first note,billing\nu1,second note,outage\nu2,third,billing\n")
    )
    ds = load_file(p, no_header=True, text_column="2", unit_column="1", label_column="3")
    assert ds.texts() == ["first note", "second note", "third"] and ds.unit_kind == "user"
    assert [r.label for r in ds] == ["billing", "outage", "billing"] and len(ds.units()) == 2
    j = tmp_path / "d.jsonl.gz"
    j.write_bytes(gzip.compress(b'{"body": "a note", "who": "x"}\n'))
    ds = load_file(j, text_column="body", unit_column="who")
    assert ds.texts() == ["a note"] and ds.unit_kind == "user"
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(DataError, match="not a valid gzip"):
        load_file(bad)


@pytest.mark.parametrize("inner", ["\f", "\v", "\x1c", "\u2028", "\x85", "\r"])
def test_records_are_lines_at_newlines_only(tmp_path, inner):
    """A page break, a vertical tab or a Unicode line separator inside a line is text: one
    line, one record, one privacy unit (str.splitlines made 3 lines 6 records)."""
    text = f"first{inner}half\nsecond{inner}half\r\nthird{inner}half\n"
    ds = load_file(write(tmp_path, "a.txt", text))
    assert ds.texts() == [f"first{inner}half", f"second{inner}half", f"third{inner}half"]
    assert len(ds.units()) == 3
    rows = "\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in ds.texts())
    assert len(load_file(write(tmp_path, "a.jsonl", rows))) == 3


@pytest.mark.parametrize(
    ("name", "content", "pattern", "line"),
    [
        ("nul.txt", "fine\nhas a \x00 nul\n", "NUL byte", 2),
        ("nul.jsonl", '{"text": "a"}\n{"text": "b\x00"}\n', "NUL byte", 2),
        ("nul.csv", "text\nok\nbad\x00\n", "NUL byte", 3),
        ("esc.jsonl", '{"text": "a"}\n{"text": "b\\u0000c"}\n', "escaped NUL", 2),
        ("esc_label.jsonl", '{"text": "a", "label": "x\\u0000"}\n', "escaped NUL", 1),
        ("esc_user.jsonl", '{"text": "a", "user_id": "\\u0000u"}\n', "escaped NUL", 1),
        ("surrogate.jsonl", '{"text": "a \\ud800 b"}\n', "lone surrogate", 1),
        ("dup.csv", "text,text\na,b\n", "column 2 repeats", 1),
        ("nan.jsonl", '{"text": "a", "label": NaN}\n', "NaN is not JSON", 1),
        ("inf.jsonl", '{"text": "a", "label": Infinity}\n', "Infinity is not JSON", 1),
        ("bool.jsonl", '{"text": "a", "label": true}\n', "label must be a string or an int", 1),
        ("float.jsonl", '{"text": "a", "label": 1.5}\n', "label must be a string or an int", 1),
        (
            "mixed.jsonl",
            '{"text": "a", "label": 1}\n{"text": "b", "label": "0"}\n{"text": "c", "label": "1"}\n',
            "labels mix strings and integers.*line 1 has the other type",
            2,
        ),
        ("user.jsonl", '{"text": "a", "user_id": {"a": 1}}\n', "user id must be a string", 1),
        ("deep.jsonl", '{"text": "a", "x": ' + "[" * 5000 + "]" * 5000 + "}\n", "nested deeper", 1),
    ],
)
def test_the_door_refuses_what_would_be_read_wrong(tmp_path, name, content, pattern, line):
    with pytest.raises(DataError, match=pattern) as err:
        load_file(write(tmp_path, name, content))
    assert err.value.line == line


def test_labels_of_one_type_and_integer_user_ids_are_accepted(tmp_path):
    rows = '{"text": "a", "label": 1, "user_id": 7}\n{"text": "b", "label": 0, "user_id": 7}\n'
    ds = load_file(write(tmp_path, "ok.jsonl", rows))
    assert [r.label for r in ds] == ["1", "0"] and ds.units() == ["user-7"]
    brackets = '{"text": "[[[{{{ not nesting", "label": "a"}\n'
    assert load_file(write(tmp_path, "str.jsonl", brackets)).texts() == ["[[[{{{ not nesting"]
