"""Privlm's PII corpus, the per-type quality table, privlm's recognisers, the
``pii`` detector's targets on text it was never tuned on, and a user's rules file."""

from __future__ import annotations

import json

import pytest

from privlm.detect import (
    AnnotatedText,
    Span,
    evaluate_pii,
    load_annotated,
    make_detector,
    pii_corpus,
    write_corpus,
)
from privlm.detect.pii_corpus import SLOT_TYPES, STRUCTURED
from privlm.detect.pii_patterns import PiiPatternDetector
from privlm.detect.pii_quality import score_texts
from privlm.errors import DataError, PrivlmError

pytestmark = pytest.mark.fast


def test_the_corpus_is_seeded_typed_and_round_trips(tmp_path):
    a, b = pii_corpus(50, seed=3), pii_corpus(50, seed=3)
    assert a == b and a != pii_corpus(50, seed=4)
    kinds = {s.label for t in a for s in t.sensitive}
    assert kinds <= {k for k in SLOT_TYPES.values() if k}
    for t in a:
        for s in t.sensitive:
            assert t.text[s.start : s.end].strip() == t.text[s.start : s.end] != ""
    assert load_annotated(write_corpus(tmp_path / "c.jsonl", a)) == a


def test_the_held_out_corpus_uses_other_templates_and_locales():
    dev = {t.text for t in pii_corpus(300, seed=0)}
    held = pii_corpus(300, seed=0, held_out=True)
    assert not dev & {t.text for t in held}
    assert any("surname" in t.text for t in held) and not any("surname" in t for t in dev)


def test_quality_counts_full_span_overlap_precision_and_over_redaction():
    sample = [
        AnnotatedText("call Ann Lee at 555", (Span(5, 12, "PERSON"), Span(16, 19, "PHONE"))),
        AnnotatedText("zip 12345 ok", (Span(4, 9, "ZIP"),)),
    ]
    detected = [
        [Span(5, 8, "PERSON"), Span(9, 12, "PERSON"), Span(13, 15, "WORD")],  # Ann, Lee, "at"
        [Span(4, 7, "NUMBER")],  # "123" of 12345
    ]
    q = score_texts("hand", sample, detected, 0.0)
    assert q.recall_by_type["PERSON"].full == 1.0  # two spans, nothing readable left
    assert q.recall_by_type["PHONE"].overlap == 0.0
    assert q.recall_by_type["ZIP"].full == 0.0 and q.recall_by_type["ZIP"].overlap == 1.0
    assert q.full_recall == pytest.approx(1 / 3) and q.overlap_recall == pytest.approx(2 / 3)
    assert q.precision == pytest.approx(3 / 4)  # "at" overlaps no gold span
    assert q.over_redaction == pytest.approx(2 / (3 + 3 + 2 + 3))
    assert q.precision_by_label["WORD"].over_redaction == 1.0


@pytest.mark.parametrize(
    ("text", "secret", "label"),
    [
        (
            "ship to 221 Baker Street, Springfield, IL 62704 today",
            "221 Baker Street, Springfield, IL 62704",
            "STREET_ADDRESS",
        ),
        ("send it to 17 Oak Ave Apt 4B please", "17 Oak Ave Apt 4B", "STREET_ADDRESS"),
        ("flat at 5 Hill Road, Leeds LS1 4AP", "5 Hill Road, Leeds LS1 4AP", "STREET_ADDRESS"),
        ("the postcode is SW1A 1AA", "SW1A 1AA", "ZIP"),
        ("seen by Dr. Jane Okafor today", "Dr. Jane Okafor", "PERSON"),
        ("paid by Sara Foster DVM", "Sara Foster DVM", "PERSON"),
        ("born March 3, 1981 in town", "March 3, 1981", "DATE"),
        ("about order #A12-9981 again", "#A12-9981", "ID"),
        ("ticket of INC0012345; thanks", "INC0012345", "ID"),
        ("my username is crystal_m84", "crystal_m84", "USERNAME"),
        ("hi my name is crystal minh", "crystal minh", "PERSON"),
        ("please talk to maria lopez she knows", "maria lopez", "PERSON"),
    ],
)
def test_privlms_recognisers(text, secret, label):
    (spans,) = PiiPatternDetector().detect([text])
    start = text.index(secret)
    covering = [s for s in spans if s.start <= start and start + len(secret) <= s.end]
    assert covering, (text, spans)
    assert label in covering[0].label.split("|")


def test_ordinary_sentences_are_left_alone():
    text = "The package arrived late and the box was damaged, so I would like a refund."
    assert PiiPatternDetector().detect([text]) == [[]]


def test_the_fast_detector_meets_the_structured_targets_on_held_out_text():
    """Every structured type ≥ 90 % full-span recall and at most 20 % of flagged characters
    outside PII, without the tagger (tests/tagger checks ``pii`` with it)."""
    q = evaluate_pii(make_detector("pii-fast"), pii_corpus(400, seed=11, held_out=True))
    for kind in STRUCTURED:
        assert q.recall_by_type[kind].full >= 0.90, (kind, q.recall_by_type[kind])
    assert q.over_redaction <= 0.20


def test_presidio_never_downloads_the_suffix_list():
    import tldextract.tldextract as module

    (spans,) = make_detector("presidio").detect(["write to ann@example.com"])
    assert any("EMAIL" in s.label for s in spans)
    assert module.TLD_EXTRACTOR.suffix_list_urls == ()


RULES_YAML = """
patterns:
  - {label: MRN, regex: "MRN[- ]?\\\\d{7}"}
deny:
  - {label: PROJECT, terms: [Falcon]}
allow:
  - {label: PRODUCT, terms: [Acme Cloud]}
"""


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_rules_file_adds_patterns_and_deny_terms_and_allows_terms(tmp_path, suffix):
    import yaml

    path = tmp_path / f"rules{suffix}"
    raw = yaml.safe_load(RULES_YAML)
    path.write_text(json.dumps(raw) if suffix == ".json" else RULES_YAML)
    det = make_detector("regex", patterns=path)
    text = "MRN-1234567 moved Falcon to Acme Cloud 2 on 4411"
    (spans,) = det.detect([text])
    found = {text[s.start : s.end]: s.label for s in spans}
    assert found["MRN-1234567"].startswith("MRN") or "MRN" in found["MRN-1234567"]
    assert found["Falcon"] == "PROJECT" and found["4411"] == "NUMBER"
    base = make_detector("regex").detect(["Acme Cloud 2"])[0]
    assert base and make_detector("regex", patterns=path).detect(["Acme Cloud"]) == [[]]
    assert det.name == f"regex+{path.name}"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("patterns:\n  - {label: X, regex: '('}\n", "bad regex"),
        ("patterns:\n  - {regex: 'a'}\n", "needs a label"),
        ("deny:\n  - {label: X, terms: []}\n", "non-empty 'terms'"),
        ("denied:\n  - {label: X, terms: [a]}\n", "at least one of"),
        ("patterns: [{label: X, regex: a}]\nextra: 1\n", "unknown section"),
        ("patterns: [unclosed\n", "not valid YAML"),
    ],
)
def test_rules_file_errors_say_what_is_wrong(tmp_path, content, problem):
    path = tmp_path / "rules.yaml"
    path.write_text(content)
    with pytest.raises(DataError, match=problem):
        make_detector("regex", patterns=path)


def test_jft_defaults_to_the_pii_detector_in_the_library_cli_and_service():
    from privlm.training.jft import JftConfig

    assert JftConfig().detector == "pii"
    pytest.importorskip("fastapi")
    from privlm.service.job_params import JftParams

    assert JftParams.model_fields["detector"].default == "pii"


def test_support_dialogues_keep_one_persona_per_customer():
    from privlm.detect.pii_corpus import join_turns, support_dialogues
    from privlm.detect.pii_templates import AGENT_TURNS

    a = support_dialogues(20, seed=5, turns=(3, 4))
    assert a == support_dialogues(20, seed=5, turns=(3, 4)) != support_dialogues(20, seed=6)
    for dialogue in a:
        customer = [t for t in dialogue if t.text not in AGENT_TURNS]
        assert 3 <= len(customer) <= 4
        values: dict[str, set[str]] = {}
        for t in dialogue:
            for s in t.sensitive:
                values.setdefault(s.label, set()).add(t.text[s.start : s.end].lower())
        for kind in ("EMAIL", "PHONE", "STREET_ADDRESS", "USERNAME", "CREDIT_CARD"):
            assert len(values.get(kind, ())) <= 1, (kind, values[kind])
        # one first name and one surname, in whatever combination the turns use
        assert len({w for n in values.get("PERSON", ()) for w in n.split()}) <= 2
        joined = join_turns(dialogue)
        assert joined.text == "\n".join(t.text for t in dialogue)
        moved = [joined.text[s.start : s.end] for s in joined.sensitive]
        assert moved == [t.text[s.start : s.end] for t in dialogue for s in t.sensitive]
    with pytest.raises(PrivlmError, match="turns"):
        support_dialogues(3, turns=(4, 2))
