"""The curator's report beside a synthetic release: what the data's owner checks before
sharing it.

For every text: its longest word run shared with one record, its word n-gram overlap, the
records it nearly or exactly copies (:mod:`privlm.synth.overlap`), the PII a detector finds
in it that also occurs in the records (JFT's detectors, :mod:`privlm.detect`), and, where
asked, whether a canary planted in the records comes back.

The report is computed on the private records, so no ε covers it: it is written apart
(``<out>.curator.json`` beside the CLI's output; the service job's curator part, never
inside its folder, its zip or a saved dataset), labelled for the data's owner, and names
records by their line in the upload only. A release's DP guarantee does not depend on it:
it measures one draw; the guarantee bounds every draw (docs/sharp_edges.md, "DP synthetic
text").
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privlm.data import Record
from privlm.data.canonical import canonical_text
from privlm.synth.overlap import NGRAM, RecordOverlap, TextOverlap

REPORT_FORMAT = "privlm-synth-report/1"
REPORT_NOTE = (
    "for the data's owner, not DP: computed on the private records, so never part of the "
    "release; a DP release may still echo a common phrase, and one draw is not the guarantee"
)
LONG_RUN = 8  # words: a run this long is counted as a verbatim echo
MIN_PII_CHARS = 4  # shorter detected spans are not looked up in the records


def overlap_report(
    texts: Sequence[str],
    records: Sequence[Record],
    detector: Any | None = None,
    canaries: Sequence[str] = (),
) -> dict[str, Any]:
    """The report of ``texts`` against ``records`` (see the module docstring);
    ``detector``: a :class:`privlm.detect.Detector`, or None for no PII check."""
    index = RecordOverlap([r.text for r in records])
    measured = [index.of(t) for t in texts]
    canonical = index.canonical_texts
    pii = _pii_echoes(texts, canonical, detector) if detector is not None else None
    rows = [_row(i, m, records, pii) for i, m in enumerate(measured)]
    report: dict[str, Any] = {
        "format": REPORT_FORMAT, "note": REPORT_NOTE, "texts": len(texts),
        "records": len(records), "summary": _summary(measured, pii, detector),
        "per_text": rows,
    }  # fmt: skip
    if canaries:
        report["canaries"] = _canary_echoes(texts, canonical, canaries)
    return report


def _line(records: Sequence[Record], i: int) -> int:
    """A record's line in its upload (its position when the loader gave none)."""
    line = records[i].line
    return int(line) if line is not None else i


def _row(
    i: int, m: TextOverlap, records: Sequence[Record], pii: list[list[dict[str, str]]] | None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "text": i, "longest_run_words": m.longest_run,
        "run_record_line": None if m.run_record is None else _line(records, m.run_record),
        f"word_{NGRAM}gram_overlap": m.ngram_overlap,
        "exact_copy_of_line": None if m.exact_copy_of is None else _line(records, m.exact_copy_of),
        "near_copy_of_lines": [_line(records, j) for j in m.near_copies_of],
    }  # fmt: skip
    if pii is not None:
        row["pii_also_in_records"] = pii[i]
    return row


def _summary(
    measured: Sequence[TextOverlap], pii: list[list[dict[str, str]]] | None, detector: Any
) -> dict[str, Any]:
    runs = [m.longest_run for m in measured]
    grams = [m.ngram_overlap for m in measured if m.ngram_overlap is not None]
    out: dict[str, Any] = {
        "longest_run_words_max": max(runs, default=0),
        "longest_run_words_median": statistics.median(runs) if runs else 0,
        f"texts_with_a_run_of_{LONG_RUN}_words_or_more": sum(r >= LONG_RUN for r in runs),
        f"word_{NGRAM}gram_overlap_mean": statistics.fmean(grams) if grams else None,
        "exact_copies": sum(m.exact_copy_of is not None for m in measured),
        "near_copies": sum(bool(m.near_copies_of) for m in measured),
    }
    if pii is not None:
        out["texts_with_pii_also_in_records"] = sum(bool(p) for p in pii)
        out["pii_detector"] = getattr(detector, "name", type(detector).__name__)
    return out


def _pii_echoes(
    texts: Sequence[str], canonical_records: Sequence[str], detector: Any
) -> list[list[dict[str, str]]]:
    """Per text, the spans ``detector`` flags whose canonical form occurs in a record."""
    corpus = "\n".join(canonical_records)
    found: list[list[dict[str, str]]] = []
    for text, spans in zip(texts, detector.detect(list(texts)), strict=True):
        echoes, seen = [], set()
        for span in spans:
            piece = canonical_text(text[span.start : span.end])
            if len(piece) >= MIN_PII_CHARS and piece in corpus and piece not in seen:
                seen.add(piece)
                echoes.append({"text": text[span.start : span.end], "label": span.label})
        found.append(echoes)
    return found


def _canary_echoes(
    texts: Sequence[str], canonical_records: Sequence[str], canaries: Sequence[str]
) -> list[dict[str, Any]]:
    """Per canary: how many records hold it (it was planted) and how many texts repeat it."""
    canonical_texts = [canonical_text(t) for t in texts]
    rows = []
    for canary in canaries:
        c = canonical_text(canary)
        rows.append({
            "canary": canary,
            "records_holding_it": sum(c in r for r in canonical_records),
            "texts_repeating_it": sum(c in t for t in canonical_texts),
        })  # fmt: skip
    return rows


def report_of_output(
    out: str | Path, records: Sequence[Record], detector: str | None, canaries: Sequence[str] = ()
) -> dict[str, Any]:
    """The report of the texts a run wrote to ``out`` (JSONL), with the detector a spec
    names (:func:`privlm.detect.make_detector`; None: no PII check)."""
    texts = [json.loads(line)["text"] for line in Path(out).read_text().splitlines() if line]
    found = None
    if detector is not None:
        from privlm.detect import make_detector

        found = make_detector(detector)
    return overlap_report(texts, records, found, canaries)


def shortened(report: dict[str, Any], rows: int = 50) -> dict[str, Any]:
    """``report`` with only its ``rows`` texts of longest shared runs (a service job's
    result keeps these; the CLI's file keeps every row)."""
    worst = sorted(report["per_text"], key=lambda r: -r["longest_run_words"])[:rows]
    return {**report, "per_text": worst, "per_text_kept": f"the {len(worst)} longest runs"}
