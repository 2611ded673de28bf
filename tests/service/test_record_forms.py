"""The budget follows records, not one column, one byte encoding or one unit
(privlm.service.record_index; docs/sharp_edges.md, "What the record index recognises" and
"One unit per body of records"). Each attack is an upload through the API that used to get
a fresh budget."""

from __future__ import annotations

import csv
import html
import io
import json
import unicodedata

import pytest

from privlm.data.canonical import canonical_text
from privlm.data.records import Record, shared_record_count
from privlm.data.sketch import Sketcher, containment

SENTENCES = [
    "The customer called about a refund for order 4471 and was upset about the delay",
    "Patient reports a persistent cough for three weeks and mild fever at night",
    "Please reset the password for the café's shared finance mailbox before Monday",
    "The delivery to the Leeds warehouse arrived damaged and was sent back",
    "Our team could not open the quarterly report because the file was corrupted",
    "Zoë asked whether the clinic can move her appointment to Thursday afternoon",
    "The invoice for September lists two licences that were cancelled in July",
    "She wants to know why her card was charged twice for the same booking",
]
PLAIN = "\n".join(f"{s}." for s in SENTENCES)


def _csv(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def _upload(service, text, filename="notes.txt", **form):
    return service.upload("acme", text, filename=filename, **form)


def _lines(transform) -> str:
    return "\n".join(transform(f"{s}.") for s in SENTENCES)


def _curly(s: str) -> str:
    return f"\u201c{s}\u201d"


FORMS = {
    "nfd": lambda s: unicodedata.normalize("NFD", s),
    "nfc-of-the-nfd": lambda s: s,
    "curly quotes": _curly,
    "html escapes": lambda s: html.escape(s.replace(" ", "&nbsp;", 1)).replace(" ", "&#32;"),
    "lower case": str.lower,
    "upper case": str.upper,
    "zero-width space": lambda s: s.replace(" ", " \u200b", 3),
    "no final full stop": lambda s: s.rstrip("."),
    "full-width": lambda s: s.replace("4471", "\uff14\uff14\uff17\uff11"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_another_encoding_of_the_same_records_joins_their_budget(service, form):
    base_text = PLAIN if form != "nfc-of-the-nfd" else _lines(FORMS["nfd"])
    first = _upload(service, base_text, budget_epsilon=8).json()
    copy = _upload(service, _lines(FORMS[form]), budget_epsilon=8)
    assert copy.status_code == 201, copy.text
    assert copy.json()["budget_of"] == first["id"], form
    assert f"shares {len(SENTENCES)} of its {len(SENTENCES)} records" in copy.json()["budget_note"]


def test_the_same_texts_under_another_column_join_the_budget(service):
    first = _upload(service, PLAIN).json()
    rows = [{"text": "see note", "note": f"{s}."} for s in SENTENCES]
    moved = _upload(service, _csv(rows), "moved.csv", fields="note")
    assert moved.status_code == 201, moved.text
    assert moved.json()["budget_of"] == first["id"]
    pairs = [{"text": "entailment?", "hypothesis": f"{s}."} for s in SENTENCES]
    as_hypothesis = _upload(service, _csv(pairs), "pairs.csv")
    assert as_hypothesis.json()["budget_of"] == first["id"], as_hypothesis.text


def test_a_copy_in_another_column_cannot_be_declared_public(service):
    _upload(service, PLAIN)
    rows = [{"text": "label me", "hypothesis": f"{s.upper()}"} for s in SENTENCES[:3]]
    r = _upload(service, _csv(rows), "public.csv", public="true")
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "3 of its 3 records" in message and "lines 2, 3, 4" in message
    assert SENTENCES[0] not in message and SENTENCES[0].upper() not in message


NEAR = {
    "one character changed": lambda s: s.replace("the", "teh", 1),
    "a prefix added": lambda s: f"Forwarded from the help desk: {s}",
    "split in two": None,
    "merged in pairs": None,
}


def _near_variant(kind: str) -> str:
    if kind == "split in two":
        halves = [part for s in SENTENCES for part in (s[: len(s) // 2], s[len(s) // 2 :])]
        return "\n".join(halves)
    if kind == "merged in pairs":
        return "\n".join(f"{a}. {b}." for a, b in zip(SENTENCES[::2], SENTENCES[1::2], strict=True))
    return "\n".join(NEAR[kind](s) for s in SENTENCES)


@pytest.mark.parametrize("kind", sorted(NEAR))
def test_a_near_copy_joins_the_budget_and_says_which_lines_matched(service, kind):
    first = _upload(service, PLAIN).json()
    near = _upload(service, _near_variant(kind))
    assert near.status_code == 201, near.text
    body = near.json()
    assert body["budget_of"] == first["id"], kind
    assert "near copies" in body["budget_note"] and "line" in body["budget_note"]


def test_a_near_copy_cannot_be_declared_public(service):
    _upload(service, PLAIN)
    r = _upload(service, _near_variant("one character changed"), public="true")
    assert r.status_code == 400 and "near copies" in r.json()["error"]["message"]


def test_unrelated_texts_of_the_same_domain_get_a_budget_of_their_own(service):
    _upload(service, PLAIN)
    other = [
        "The projector in meeting room four shows only a blue screen since the update",
        "A parcel for the Bristol office is waiting at the depot with a customs form",
        "Can someone approve the travel request for the conference in Lisbon next month",
        "The nurse noted the patient slept well and asked for more water this morning",
    ]
    r = _upload(service, "\n".join(other))
    assert r.status_code == 201 and r.json().get("budget_of") in (None, r.json()["id"]), r.text


def test_canonical_form_and_sketch_measure_what_the_docs_say():
    assert canonical_text("  \u201cHello&amp;nbsp;World\u201d.\u200b ") == "hello world"
    assert canonical_text("!!!") == "!!!"  # only punctuation: still a record
    sk = Sketcher(b"k" * 32)
    a = sk.sketch(canonical_text(SENTENCES[0]))
    b = sk.sketch(canonical_text(SENTENCES[1]))
    assert a is not None and b is not None and containment(a, b) < 0.3
    assert sk.sketch("too short to sketch") is None
    half = sk.sketch(canonical_text(SENTENCES[0][:40]))
    assert half is not None and containment(a, half) > 0.7


def test_the_library_check_of_public_inputs_sees_other_forms_and_columns():
    """``privlm prompt pate`` (no service) refuses public inputs that are private records:
    in another case, with curly quotes, or in another field."""
    private = [Record(s, f"r{i}") for i, s in enumerate(SENTENCES)]
    public = [
        Record(SENTENCES[0].lower(), "p0"),
        Record(_curly(SENTENCES[1]), "p1"),
        Record("unrelated", "p2", fields={"hypothesis": SENTENCES[2] + "."}),
        Record("a text of its own that no private record has", "p3"),
    ]
    assert shared_record_count(private, public) == 3


USERS = [f"u{i % 4}" for i in range(len(SENTENCES))]  # 4 users, 2 records each


def _by_user(users: list[str] | None) -> str:
    if users is None:
        return "\n".join(json.dumps({"text": s}) for s in SENTENCES)
    return "\n".join(
        json.dumps({"text": s, "user_id": u}) for s, u in zip(SENTENCES, USERS, strict=True)
    )


def test_a_record_level_copy_cannot_join_a_per_user_budget(service):
    first = _upload(service, _by_user(USERS), "users.jsonl")
    assert first.status_code == 201, first.text
    r = _upload(service, _by_user(None), "records.jsonl")
    assert r.status_code == 400, r.text
    assert "user_id" in r.json()["error"]["message"]


def test_one_user_spread_over_several_ids_is_refused_and_the_same_ids_join(service):
    first = _upload(service, _by_user(USERS), "users.jsonl").json()
    one_each = "\n".join(
        json.dumps({"text": s, "user_id": f"p{i}"}) for i, s in enumerate(SENTENCES)
    )
    r = _upload(service, one_each, "one-each.jsonl")
    assert r.status_code == 400, r.text
    assert "more than one user id" in r.json()["error"]["message"]
    shouted = "\n".join(
        json.dumps({"text": s.upper(), "user_id": u}) for s, u in zip(SENTENCES, USERS, strict=True)
    )
    same = _upload(service, shouted, "again.jsonl")
    assert same.status_code == 201, same.text
    assert same.json()["budget_of"] == first["id"]


def test_a_per_record_budget_admits_a_per_user_copy(service):
    first = _upload(service, PLAIN).json()
    r = _upload(service, _by_user(USERS), "users.jsonl")
    assert r.status_code == 201 and r.json()["budget_of"] == first["id"], r.text


def test_an_index_made_before_is_rebuilt_for_stored_datasets_at_start(tmp_path):
    """A database whose index holds only whitespace digests of the text column: at start
    its stored datasets are indexed again in canonical form, and the old digests of a
    deleted dataset still match an exact re-upload."""
    from privlm.data import load_file
    from privlm.service.db import Dataset as Row
    from privlm.service.db import (
        RecordDigest,
        ServiceMeta,
        database_url,
        make_engine,
        session_factory,
    )
    from privlm.service.keys import create_tenant
    from privlm.service.record_index import (
        VERSION_KEY,
        backfill,
        find_matches,
        fingerprint,
        server_secret,
        tenant_key,
    )

    path = tmp_path / "notes.txt"
    path.write_text(PLAIN)
    sessions = session_factory(make_engine(database_url(None, tmp_path)))
    with sessions.begin() as s:
        secret = server_secret(s, tmp_path)
        t, _ = create_tenant(s, "a")
        s.add(Row(id="ds_old", tenant_id=t.id, name="notes", format="txt", records=8, bytes=1,
                  path=str(path), budget_epsilon=8.0, budget_delta=1e-5, budget_id="ds_old",
                  records_indexed=True))  # fmt: skip
        key = tenant_key(secret, t.id)
        legacy = {f.legacy for p in fingerprint(load_file(path).records, key, "") for f in p.fields}
        s.add_all(RecordDigest(tenant_id=t.id, digest=d, budget_id="ds_old") for d in legacy)
        gone = Record("A record of a dataset deleted long ago", "r0")
        [old] = fingerprint([gone], key, "")[0].fields
        s.add(RecordDigest(tenant_id=t.id, digest=old.legacy, budget_id="ds_gone"))
    with sessions.begin() as s:
        assert s.get(ServiceMeta, VERSION_KEY) is None
        backfill(s, secret, lambda row: load_file(row.path))
        assert s.get(ServiceMeta, VERSION_KEY) is not None
        lower = [Record(x.lower(), f"r{i}") for i, x in enumerate(SENTENCES)]
        assert find_matches(s, t.id, fingerprint(lower, key, "x")).owners() == {"ds_old": 8}
        assert s.get(Row, "ds_old").unit_kind == "record"
        assert find_matches(s, t.id, fingerprint([gone], key, "y")).owners() == {"ds_gone": 1}
