"""Task files: the bundled tasks are task files, a user's task loads from YAML
or JSON, and every error names the file and the field."""

from __future__ import annotations

import json

import pytest

from privlm.data import Record
from privlm.errors import DataError
from privlm.prompting.tasks import (
    TASKS,
    build_prompt,
    content_free_records,
    get_task,
    label_token_ids,
    load_task_file,
)

TICKETS = """\
name: ticket-topic
labels: {billing: Billing, outage: Outage, account: Account}
template: "Product: {product}\\nTicket: {text}\\nTopic:"
columns: {text: body, label: topic, user: customer}
"""


@pytest.mark.fast
def test_the_bundled_tasks_are_task_files_with_the_papers_prompts():
    assert sorted(TASKS) == ["agnews", "cb", "rte", "sst2", "trec"]
    sst2 = get_task("sst2")
    assert sst2.template(Record("dull", "r")) == "Review: dull\nSentiment:"
    assert sst2.verbalizers == ("Negative", "Positive") and sst2.corpus == "sst2"
    cb = get_task("cb")
    assert cb.verbalizers == ("false", "true", "neither")  # quoted: never YAML booleans
    q = Record("It rained.", "r", "entailment", None, {"hypothesis": "It was wet"})
    assert get_task("rte").template(q).endswith("It was wet True or False?\nanswer:")


def test_a_users_task_from_yaml_and_json(tmp_path, tiny):
    y = tmp_path / "t.yaml"
    y.write_text(TICKETS)
    task = load_task_file(y)
    assert task.labels == ("billing", "outage", "account") and task.extra_fields() == ["product"]
    assert task.columns == {"text": "body", "label": "topic", "user": "customer"}
    demo = Record("charged twice", "u1", "billing", 3, {"product": "Pro"})
    assert build_prompt(task, [demo], Record("down", "u2", None, 4, {"product": "Pro"})).startswith(
        "Product: Pro\nTicket: charged twice\nTopic: Billing\n\n"
    )
    assert all(r.fields == {"product": r.text} for r in content_free_records(task))
    assert len(set(label_token_ids(task, tiny.tokenizer))) == 3
    j = tmp_path / "t.json"
    j.write_text(json.dumps(task.to_spec()))
    assert load_task_file(j) == task.__class__(**{**task.__dict__, "source": str(j)})


@pytest.mark.fast
@pytest.mark.parametrize(
    "text, field",
    [
        ("labels: {a: A, b: B}\ntemplate: '{text}'\n", "'name' is missing"),
        ("name: x\nlabels: [a]\ntemplate: '{text}'\n", "at least two labels"),
        ("name: x\nlabels: [a, b]\nverbalizers: [A]\ntemplate: '{text}'\n", "field 'verbalizers'"),
        ("name: x\nlabels: [a, b]\ntemplate: 'no placeholder'\n", "no {text} placeholder"),
        ("name: x\nlabels: [a, b]\ntemplate: '{text}'\ncolour: red\n", "unknown field"),
        ("name: x\nlabels: [a, b\n", "not valid YAML"),
    ],
)
def test_every_task_file_error_names_the_file_and_the_field(tmp_path, text, field):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(DataError, match=field) as err:
        load_task_file(p)
    assert str(p) in str(err.value)


def test_verbalisers_sharing_a_first_token_are_refused_naming_both(tmp_path, tiny):
    p = tmp_path / "same.yaml"
    p.write_text("name: x\nlabels: {a: Billing issue, b: Billing question}\ntemplate: '{text}'\n")
    with pytest.raises(DataError, match="'Billing issue' and 'Billing question'") as err:
        label_token_ids(load_task_file(p), tiny.tokenizer)
    assert str(p) in str(err.value)


@pytest.mark.fast
def test_a_record_without_a_template_field_or_with_an_unknown_label_is_named_by_line(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(TICKETS)
    task = load_task_file(p)
    with pytest.raises(Exception, match=r"line 7\) has no 'product' field"):
        task.template(Record("secret text", "u", "billing", 7))
    with pytest.raises(Exception, match="label on line 9 is not one of") as err:
        task.class_of(Record("secret text", "u", "refund", 9, {"product": "P"}))
    assert "secret" not in str(err.value) and "refund" not in str(err.value)


@pytest.mark.fast
def test_public_inputs_may_use_the_templates_own_names_where_the_private_file_is_renamed(
    tmp_path,
):
    """The task file's renames describe the private data; public inputs from elsewhere
    (the README's headlines.jsonl) carry ``text`` and the template's field names."""
    from privlm.prompting.task_data import load_task_records

    p = tmp_path / "t.yaml"
    p.write_text(TICKETS)
    task = load_task_file(p)
    public = tmp_path / "headlines.jsonl"
    public.write_text(json.dumps({"text": "Outage in region", "product": "Pro"}) + "\n")
    (got,) = load_task_records(public, task, "public").records
    assert got.text == "Outage in region" and got.fields == {"product": "Pro"}
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(json.dumps({"body": "Charged twice", "product": "Pro"}) + "\n")
    assert load_task_records(renamed, task, "public").records[0].text == "Charged twice"
    private = tmp_path / "private.jsonl"
    private.write_text(json.dumps({"text": "x", "topic": "billing", "product": "P"}) + "\n")
    with pytest.raises(DataError, match="body"):  # the private file follows the task file
        load_task_records(private, task, "private")
