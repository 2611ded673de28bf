"""Detector quality on CoNLL-2003 and the miss-rate interval of JFT's light-noise mode,
checked against hand counts and scipy's t-interval."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from privlm.data.corpora import NerSentence
from privlm.detect import Span, evaluate_on_conll, load_annotated, miss_rate_interval
from privlm.detect.conll_eval import gold_entities
from privlm.detect.miss_rate import AnnotatedText, annotated_from_conll
from privlm.errors import DataError, PrivlmError
from tests.conftest import requires_data

pytestmark = pytest.mark.fast


class WordDetector:
    """Flags exactly the given words."""

    def __init__(self, words):
        self.words = set(words)
        self.name = "words"

    def detect(self, texts):
        out = []
        for t in texts:
            spans, pos = [], 0
            for w in t.split(" "):
                if w in self.words:
                    spans.append(Span(pos, pos + len(w), "W"))
                pos += len(w) + 1
            out.append(spans)
        return out


def test_gold_entities_read_iob1():
    tags = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]
    assert gold_entities(tags) == [("PER", [0, 1]), ("LOC", [3]), ("LOC", [4]), ("ORG", [5])]


def test_recall_and_precision_match_hand_counts():
    sents = [
        NerSentence(["John", "Smith", "visited", "Paris", "."], ["I-PER", "I-PER", "O", "I-LOC", "O"]),
        NerSentence(["Acme", "Corp", "sued", "him", "."], ["I-ORG", "I-ORG", "O", "O", "O"]),
    ]  # fmt: skip
    q = evaluate_on_conll(WordDetector({"John", "Paris", "him", "Acme", "Corp"}), sents)
    # gold tokens: John Smith Paris Acme Corp (5); flagged: John Paris him Acme Corp (5); hit 4
    assert (q.entity_tokens, q.flagged_tokens, q.tokens) == (5, 5, 10)
    assert q.token_recall == pytest.approx(4 / 5)
    assert q.token_precision == pytest.approx(4 / 5)
    # entities: PER (half caught: not caught), LOC caught, ORG caught
    assert q.entity_recall == pytest.approx(2 / 3)
    assert q.recall_by_type == {"LOC": 1.0, "ORG": 1.0, "PER": 0.0}


@requires_data
def test_spacy_levels_on_conll_have_increasing_recall():
    from privlm.data.corpora import conll2003
    from privlm.detect import make_detector

    sents = conll2003("testa")[:60]
    recalls = [
        evaluate_on_conll(make_detector(level), sents).token_recall
        for level in ("low-entity", "high-entity", "low-contextual", "high-contextual")
    ]
    assert recalls == sorted(recalls)
    assert recalls[0] > 0.5 and recalls[-1] > 0.9


def test_miss_rate_interval_is_scipys_t_interval():
    # 20 records of 4 words; the record's first word is a secret; the detector catches it in
    # every third record
    sample = [AnnotatedText(f"s{i} w x y", (Span(0, len(f"s{i}"), "GOLD"),)) for i in range(20)]
    caught = {f"s{i}" for i in range(0, 20, 3)}
    iv = miss_rate_interval(WordDetector(caught), sample, groups=5, seed=1)
    assert iv.tokens == 80 and iv.sensitive_tokens == 20 and iv.missed_tokens == 13
    assert iv.sensitive_miss_rate == pytest.approx(13 / 20)  # per sensitive token
    mean = sum(iv.per_group) / 5
    lo, hi = stats.t.interval(0.95, 4, loc=mean, scale=stats.sem(iv.per_group))
    assert iv.mean == pytest.approx(mean)
    assert iv.low == pytest.approx(max(0.0, lo)) and iv.high == pytest.approx(hi)
    assert iv.low <= 13 / 80 <= iv.high


def test_miss_rate_needs_enough_records():
    with pytest.raises(PrivlmError, match="at least 10"):
        miss_rate_interval(WordDetector([]), [AnnotatedText("a b", ())] * 3)


def test_annotated_file_by_offsets_or_secrets(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(
        json.dumps({"text": "My ID is 123", "sensitive": [[9, 12]]}) + "\n"
        + json.dumps({"text": "Ann and Ann", "secrets": ["Ann"]}) + "\n"
    )  # fmt: skip
    a, b = load_annotated(p)
    assert a.sensitive == (Span(9, 12, "SENSITIVE"),)
    assert [(s.start, s.end) for s in b.sensitive] == [(0, 3), (8, 11)]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"text": "abc", "sensitive": [[2, 9]]}', "bad span"),
        ('{"text": "abc", "spans": [{"start": 1, "end": 0, "type": "X"}]}', "bad span"),
        ('{"text": "abc", "secrets": ["zz"]}', "does not occur"),
        ('{"txt": "abc"}', '"text"'),
        ("not json", "invalid JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_annotated_file_errors_name_the_line(tmp_path, line, problem):
    p = tmp_path / "a.jsonl"
    p.write_text('{"text": "ok"}\n' + line + "\n")
    with pytest.raises(DataError, match=problem) as e:
        load_annotated(p)
    assert ":2" in str(e.value)


def test_conll_sentences_become_annotated_texts():
    (a,) = annotated_from_conll([NerSentence(["Ann", "left", "Rome"], ["I-PER", "O", "I-LOC"])])
    assert a.text == "Ann left Rome"
    assert [a.text[s.start : s.end] for s in a.sensitive] == ["Ann", "Rome"]
    assert not math.isnan(len(a.sensitive))
