"""Bundled corpora: the counts MANIFEST.md states, and a clear error without a data dir."""

from __future__ import annotations

import pytest

from privlm import settings
from privlm.data import corpora
from privlm.errors import DataError
from tests.conftest import requires_data

pytestmark = pytest.mark.fast


@requires_data
@pytest.mark.parametrize(
    ("loader", "split", "count"),
    [
        (corpora.sst2, "train", 6920),
        (corpora.sst2, "dev", 872),
        (corpora.sst2, "test", 1821),
        (corpora.trec, "train", 5452),
        (corpora.trec, "test", 500),
        (corpora.cb, "val", 56),
        (corpora.rte, "val", 277),
        (corpora.agnews, "test", 7600),
    ],
)
def test_counts_match_manifest(loader, split, count):
    assert len(loader(split)) == count


@requires_data
def test_wikitext_lines_are_records_or_reported_skips():
    ds = corpora.wikitext2("valid")
    assert len(ds) + len(ds.skipped) == 3760


@requires_data
def test_conll_counts():
    sents = corpora.conll2003("testa")
    assert len(sents) == 3250
    assert sum(len(s.tokens) for s in sents) == 51362
    assert {t for s in sents for t in s.tags} <= {
        "O",
        "I-PER",
        "I-ORG",
        "I-LOC",
        "I-MISC",
        "B-PER",
        "B-ORG",
        "B-LOC",
        "B-MISC",
    }


@requires_data
def test_labels_are_named():
    assert set(corpora.sst2("dev").summary()["labels"]) == {"negative", "positive"}
    assert set(corpora.agnews().summary()["labels"]) == {"World", "Sports", "Business", "Sci/Tech"}
    assert set(corpora.trec("test").summary()["labels"]) == {
        "ABBR",
        "DESC",
        "ENTY",
        "HUM",
        "LOC",
        "NUM",
    }
    assert corpora.rte("val").records[0].fields["hypothesis"]


def test_unknown_split():
    with pytest.raises(DataError, match="unknown split 'validation'"):
        corpora.sst2("validation")


def test_missing_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVLM_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match="PRIVLM_DATA points to a directory that does not exist"):
        settings.data_dir()
    assert not any(corpora.available().values())
    monkeypatch.setenv("PRIVLM_DATA", str(tmp_path))
    with pytest.raises(DataError, match="corpus file not found"):
        corpora.sst2()
