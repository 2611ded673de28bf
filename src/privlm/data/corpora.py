"""Loaders for the public corpora under the data directory (see ``shared/data/MANIFEST.md``).

The directory is :func:`privlm.settings.data_dir` (env ``PRIVLM_DATA``). Nothing here is
copied into the repository.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privlm.data.records import Dataset, Record, Skip
from privlm.errors import DataError, PrivlmError
from privlm.settings import data_dir

SST2_LABELS = {"0": "negative", "1": "positive"}
AGNEWS_LABELS = {"1": "World", "2": "Sports", "3": "Business", "4": "Sci/Tech"}


def _path(relative: str) -> Path:
    p = data_dir() / relative
    if not p.is_file():
        corpus = relative.split("/")[1] if relative.startswith("fewshot_cbu/") else relative
        name = corpus.split("/")[0]
        raise DataError(
            p,
            "corpus file not found under the data directory (PRIVLM_DATA); "
            f"`privlm data fetch {name}` downloads it",
        )
    return p


def _lines(relative: str) -> tuple[Path, list[str]]:
    p = _path(relative)
    with gzip.open(p, "rt", encoding="utf-8") as fh:
        return p, fh.read().splitlines()


def _check_split(name: str, split: str, splits: tuple[str, ...]) -> None:
    if split not in splits:
        raise DataError(name, f"unknown split {split!r}; {name} has {', '.join(splits)}")


def wikitext2(split: str = "valid", variant: str = "raw") -> Dataset:
    """WikiText-2 paragraphs and headings, one record per non-blank line."""
    _check_split("wikitext2", split, ("train", "valid", "test"))
    _check_split("wikitext2 variant", variant, ("raw", "tokens"))
    p, lines = _lines(f"wikitext2/{variant}/{split}.txt.gz")
    return _wikitext_records(p, lines)


SHIPPED = Path(__file__).with_name("samples")


def wikitext2_or_shipped_head(split: str) -> tuple[Dataset, bool]:
    """WikiText-2 (raw) from the data directory; where there is none, the head of it that
    ships with privlm for the quickstart: the first 2,000 train and 400 validation lines of
    wikitext-2-raw-v1 (Merity et al. 2016; CC BY-SA 3.0, see docs/data.md). Returns the
    dataset and whether it is the shipped head."""
    _check_split("wikitext2 head", split, ("train", "valid"))
    try:
        return wikitext2(split), False
    except PrivlmError:
        p = SHIPPED / f"wikitext2-{split}-head.txt.gz"
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            return _wikitext_records(p, fh.read().splitlines()), True


def _wikitext_records(p: Path, lines: list[str]) -> Dataset:
    records: list[Record] = []
    skipped: list[Skip] = []
    for i, line in enumerate(lines, start=1):
        if line.strip():
            records.append(Record(line.strip(), f"record-{len(records)}", line=i))
        else:
            skipped.append(Skip(i, "blank line"))
    return Dataset(records, str(p), "record", skipped)


def sst2(split: str = "train") -> Dataset:
    """SST-2 sentences labelled negative/positive."""
    _check_split("sst2", split, ("train", "dev", "test"))
    p, lines = _lines(f"fewshot_cbu/sst2/stsa.binary.{split}.gz")
    records: list[Record] = []
    for i, line in enumerate(lines, start=1):
        label, _, text = line.partition(" ")
        if label not in SST2_LABELS or not text:
            raise DataError(p, "expected '<0|1> <sentence>'", i)
        records.append(Record(text, f"record-{len(records)}", SST2_LABELS[label], i))
    return Dataset(records, str(p))


def trec(split: str = "train") -> Dataset:
    """TREC questions with their coarse class (ABBR, DESC, ENTY, HUM, LOC, NUM)."""
    _check_split("trec", split, ("train", "test"))
    p, lines = _lines(f"fewshot_cbu/trec/{split}.txt.gz")
    records: list[Record] = []
    for i, line in enumerate(lines, start=1):
        tag, _, text = line.partition(" ")
        coarse, _, fine = tag.partition(":")
        if not coarse or not text:
            raise DataError(p, "expected 'COARSE:fine question'", i)
        records.append(Record(text, f"record-{len(records)}", coarse, i, {"fine": fine}))
    return Dataset(records, str(p))


def agnews(split: str = "test") -> Dataset:
    """AG News (test set only is staged): 'Title. Description' with its topic."""
    _check_split("agnews", split, ("test",))
    p = _path("fewshot_cbu/agnews/test.csv.gz")
    records: list[Record] = []
    with gzip.open(p, "rt", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        for row in reader:
            label, title, desc = row
            text = f"{title}. {desc}".replace("\\", " ")
            records.append(
                Record(text, f"record-{len(records)}", AGNEWS_LABELS[label], reader.line_num)
            )
    return Dataset(records, str(p))


def _superglue(task: str, split: str) -> Dataset:
    _check_split(task, split, ("train", "val", "test"))
    p, lines = _lines(f"fewshot_cbu/{task}/{split}.jsonl.gz")
    records: list[Record] = []
    for i, line in enumerate(lines, start=1):
        obj = json.loads(line)
        records.append(
            Record(
                obj["premise"],
                f"record-{len(records)}",
                obj.get("label"),
                i,
                {"hypothesis": obj["hypothesis"]},
            )
        )
    return Dataset(records, str(p))


def cb(split: str = "train") -> Dataset:
    """CommitmentBank: premise (text), hypothesis (``fields``), 3-way label."""
    return _superglue("cb", split)


def rte(split: str = "train") -> Dataset:
    """RTE: premise (text), hypothesis (``fields``), entailment / not_entailment."""
    return _superglue("rte", split)


@dataclass(frozen=True)
class NerSentence:
    tokens: list[str]
    tags: list[str]


def conll2003(split: str = "testa") -> list[NerSentence]:
    """CoNLL-2003 English NER sentences with IOB1 tags (PER, ORG, LOC, MISC)."""
    _check_split("conll2003", split, ("train", "testa", "testb"))
    p, lines = _lines(f"conll2003/eng.{split}.gz")
    out: list[NerSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    for i, line in enumerate([*lines, ""], start=1):
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                out.append(NerSentence(tokens, tags))
                tokens, tags = [], []
            continue
        parts = line.split()
        if len(parts) != 4:
            raise DataError(p, "expected 4 columns: token POS chunk NER", i)
        tokens.append(parts[0])
        tags.append(parts[3])
    return out


@dataclass(frozen=True)
class Corpus:
    name: str
    description: str
    files: tuple[str, ...]
    loader: Callable[..., object]


BUNDLED: dict[str, Corpus] = {
    c.name: c
    for c in [
        Corpus(
            "wikitext2",
            "WikiText-2 (raw/tokens; train/valid/test)",
            ("wikitext2/raw/valid.txt.gz",),
            wikitext2,
        ),
        Corpus(
            "sst2",
            "SST-2 sentiment (train/dev/test)",
            ("fewshot_cbu/sst2/stsa.binary.train.gz",),
            sst2,
        ),
        Corpus(
            "trec", "TREC question classes (train/test)", ("fewshot_cbu/trec/train.txt.gz",), trec
        ),
        Corpus("agnews", "AG News topics (test only)", ("fewshot_cbu/agnews/test.csv.gz",), agnews),
        Corpus("cb", "CommitmentBank NLI (train/val/test)", ("fewshot_cbu/cb/train.jsonl.gz",), cb),
        Corpus("rte", "RTE NLI (train/val/test)", ("fewshot_cbu/rte/train.jsonl.gz",), rte),
        Corpus(
            "conll2003",
            "CoNLL-2003 English NER (train/testa/testb)",
            ("conll2003/eng.testa.gz",),
            conll2003,
        ),
    ]
}


def available() -> dict[str, bool]:
    """Which bundled corpora are present under the data directory."""
    try:
        root = data_dir()
    except PrivlmError:  # no data directory at all
        return {name: False for name in BUNDLED}
    return {name: all((root / f).is_file() for f in c.files) for name, c in BUNDLED.items()}
