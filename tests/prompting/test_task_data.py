"""A task's data from the user's files: labels and template fields checked per
line, errors that name the file, the line and the field but never the content, public files
that may be out of distribution, and the unit PromptDPSGD protects."""

from __future__ import annotations

import gzip
import json

import pytest

from privlm.data import Record
from privlm.errors import DataError, PrivlmError
from privlm.prompting.prompt_dpsgd import PromptDpSgdConfig, privacy_units
from privlm.prompting.task_data import (
    ColumnOverrides,
    TaskFiles,
    load_task_records,
    task_columns,
    task_data,
)
from privlm.prompting.tasks import get_task, parse_task_text
from tests.conftest import requires_data

pytestmark = pytest.mark.fast

TICKETS = """
name: ticket-topic
labels: {billing: Billing, outage: Outage}
template: "Ticket ({channel}): {text}\\nTopic:"
columns: {text: body, label: topic, user: customer, channel: via}
"""
SECRET = "Jane Roe 555-0100"


@pytest.fixture
def task():
    return parse_task_text(TICKETS, "tickets.yaml")


def write_csv(path, rows, header="customer,via,body,topic"):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_a_users_csv_is_read_through_the_task_files_columns(tmp_path, task):
    f = write_csv(tmp_path / "p.csv", ["c1,mail,invoice wrong,billing", "c1,chat,site down,outage"])
    ds = load_task_records(f, task, "private")
    assert [r.label for r in ds] == ["billing", "outage"]
    assert ds.records[0].fields == {"channel": "mail"} and ds.unit_kind == "user"
    assert task.template(ds.records[1]) == "Ticket (chat): site down\nTopic:"


def test_a_headerless_gzipped_csv_is_read_by_position(tmp_path):
    task = parse_task_text(
        'name: t\nlabels: [a, b]\ntemplate: "{text} / {extra}:"\n'
        "columns: {text: '2', label: '1', extra: '3'}",
        "t.yaml",
    )
    f = tmp_path / "p.csv.gz"
    f.write_bytes(gzip.compress(b"a,first text,x\nb,second text,y\n"))
    ds = load_task_records(f, task, "private", ColumnOverrides(no_header=True))
    assert [(r.text, r.label, r.fields) for r in ds] == [
        ("first text", "a", {"extra": "x"}), ("second text", "b", {"extra": "y"}),
    ]  # fmt: skip


def test_cli_columns_override_the_task_files(tmp_path, task):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"msg": "refund please", "cls": "billing", "via": "mail"}) + "\n")
    ds = load_task_records(f, task, "private", ColumnOverrides(text="msg", label="cls"))
    assert ds.records[0].text == "refund please" and ds.records[0].label == "billing"
    assert task_columns(task, ColumnOverrides(user="who"))["user"] == "who"


def test_a_label_outside_the_task_names_file_line_and_field_not_the_value(tmp_path, task):
    f = write_csv(tmp_path / "p.csv", ["c1,mail,fine,billing", f"c2,mail,x,{SECRET}"])
    with pytest.raises(DataError) as e:
        load_task_records(f, task, "private")
    msg = str(e.value)
    assert e.value.line == 3 and "'topic'" in msg and "p.csv" in msg
    assert "billing, outage" in msg and SECRET not in msg


def test_a_missing_template_field_names_file_line_and_field(tmp_path, task):
    f = write_csv(tmp_path / "p.csv", [f"c1,,{SECRET},billing"])
    with pytest.raises(DataError) as e:
        load_task_records(f, task, "private")
    assert e.value.line == 2 and "'channel'" in str(e.value) and SECRET not in str(e.value)


def test_private_and_test_data_must_be_labelled(tmp_path, task):
    f = write_csv(tmp_path / "t.csv", [f"c1,mail,{SECRET},"])
    with pytest.raises(DataError, match="'topic' is missing or empty") as e:
        load_task_records(f, task, "test")
    assert SECRET not in str(e.value)


def test_a_missing_text_column_never_quotes_the_header_or_a_record(tmp_path, task):
    f = tmp_path / "p.csv"
    f.write_text(f"{SECRET},mail,billing\nc1,chat,site down\n")
    with pytest.raises(DataError) as e:
        load_task_records(f, task, "private")
    assert "'body'" in str(e.value) and SECRET not in str(e.value)


def test_public_data_may_be_out_of_distribution(tmp_path, task):
    """An unlabelled public file, or one whose labels are another task's: the labels that are
    not this task's are dropped (they only serve to report label accuracy)."""
    f = tmp_path / "pub.jsonl"
    f.write_text(
        json.dumps({"body": "weather news", "via": "web", "topic": "sport"}) + "\n"
        + json.dumps({"body": "a bill", "via": "web", "topic": "billing"}) + "\n"
    )  # fmt: skip
    assert [r.label for r in load_task_records(f, task, "public")] == [None, "billing"]
    txt = tmp_path / "pub.txt"
    txt.write_text("one input\nanother\n")
    sst2 = get_task("sst2")
    assert len(load_task_records(txt, sst2, "public")) == 2
    with pytest.raises(DataError, match=r"\.jsonl or \.csv"):
        load_task_records(txt, task, "public")  # the template needs {channel}
    with pytest.raises(DataError, match=r"\.jsonl or \.csv"):
        load_task_records(txt, sst2, "private")


def test_a_task_without_corpus_needs_a_file_for_each_role_it_uses(tmp_path, task):
    f = write_csv(tmp_path / "p.csv", [f"c{i},mail,text {i},billing" for i in range(5)])
    with pytest.raises(PrivlmError, match="ships no data: give --public-data"):
        task_data(task, TaskFiles(private=f), {}, {"public": 300}, need=("private", "public"))
    splits = task_data(task, TaskFiles(private=f), {}, {"test": 200}, need=("private",))
    assert len(splits.private) == 5 and splits.test == [] and splits.public == []


def test_counts_draw_from_a_file_and_never_exceed_it(tmp_path, task):
    f = write_csv(tmp_path / "p.csv", [f"c{i},mail,text {i},billing" for i in range(10)])
    got = task_data(task, TaskFiles(test=f), {"test": 4}, {}, seed=1).test
    assert len(got) == 4 and len({r.text for r in got}) == 4
    assert got == task_data(task, TaskFiles(test=f), {"test": 4}, {}, seed=1).test
    with pytest.raises(DataError, match="asked for 11 examples, the file has 10"):
        task_data(task, TaskFiles(test=f), {"test": 11}, {})


def test_a_private_file_is_never_subsampled(tmp_path, task):
    """A seeded subset of a private file depends on every record in it: removing one user
    could change many picks, so the ε stated for the file would not hold. Refused."""
    f = write_csv(tmp_path / "p.csv", [f"c{i},mail,text {i},billing" for i in range(10)])
    with pytest.raises(DataError, match="trains on a private file whole"):
        task_data(task, TaskFiles(private=f), {"private": 4}, {})
    assert len(task_data(task, TaskFiles(private=f), {"private": 10}, {}).private) == 10


@requires_data
def test_a_bundled_task_mixes_a_users_public_file_with_its_corpus(tmp_path):
    pub = tmp_path / "pub.txt"
    pub.write_text("\n".join(f"headline {i}" for i in range(7)))
    splits = task_data(
        get_task("sst2"), TaskFiles(public=pub), {}, {"private": 5, "public": 300, "test": 3}
    )
    assert (len(splits.private), len(splits.public), len(splits.test)) == (5, 7, 3)


def records(users):
    return [Record(f"t{i}", u, "billing") for i, u in enumerate(users)]


def test_prompt_dpsgd_refuses_to_guess_the_unit_of_users_with_several_records():
    recs = records(["user-a", "user-a", "user-b"])
    with pytest.raises(PrivlmError, match=r"--unit user .* or --unit record"):
        privacy_units(recs, "auto")
    kept, unit, left = privacy_units(recs, "user")
    assert [r.text for r in kept] == ["t0", "t2"] and unit == "user" and left == 1
    assert privacy_units(recs, "record") == (recs, "record", 0)
    one_each = records(["user-a", "user-b"])
    assert privacy_units(one_each, "auto") == (one_each, "user", 0)
    plain = records(["record-0", "record-1"])
    assert privacy_units(plain, "user") == (plain, "record", 0)
    with pytest.raises(PrivlmError, match="unit must be one of"):
        PromptDpSgdConfig(unit="group")


def test_a_user_column_named_on_the_command_line_must_be_in_the_private_data(tmp_path, task):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"msg": "refund please", "cls": "billing", "via": "mail"}) + "\n")
    with pytest.raises(DataError, match="no 'who' column for the user"):
        load_task_records(f, task, "private", ColumnOverrides(text="msg", label="cls", user="who"))
    public = load_task_records(f, task, "public", ColumnOverrides(text="msg", user="who"))
    assert public.records[0].text == "refund please"  # public inputs need no unit
