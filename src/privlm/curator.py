"""What leaves with an artefact, and what stays with the data's curator.

A released artefact (an adapter's ``privacy.json`` and model card, JFT's ``sdp.json``, a
student prompt's statement, the service's download) holds only the configured settings,
the privacy statement and quantities covered by its ε or public by declaration: each
mechanism declares, key by key, what its statement releases (a release schema), and
:func:`split_statement` releases those keys and nothing else, a new key included
(fail-closed). Exact
statistics of the private data (tokens trained on and dropped, the share of redacted
tokens, records left out, abstaining teachers, losses, wall-clock time) would let someone
who knows the other records read one unit's presence off the file, so they go to an
operator-only report *beside* the artefact (``<out>.curator.json``), never inside it, and
the CLI prints them under "not private: for the curator" (docs/sharp_edges.md).

The number of units is public by declaration, as in DP-SGD practice: the sampling rate, the
number of steps and the default δ are computed from it, and every statement says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privlm.fsutil import write_json_atomically

CURATOR_HEADING = "not private: for the curator"
CURATOR_NOTE = (
    "not private: for the curator. Exact statistics of the private data, which no ε covers; "
    "never put inside an artefact or a download (docs/sharp_edges.md)"
)
PUBLIC_SIZE = (
    "the number of units is public by declaration (as in DP-SGD practice): the sampling "
    "rate, the number of steps and the default δ are computed from it"
)
PUBLIC = "public"  # a leaf of a release schema: the value is released as it is
Schema = Mapping[str, Any]  # key → PUBLIC, or the schema of the mapping it holds
RANDOMNESS: Schema = {"randomness": PUBLIC, "seed": PUBLIC, "warning": PUBLIC}
PLACEMENT: Schema = {"device": PUBLIC, "device_name": PUBLIC, "dtype": PUBLIC}


@dataclass(frozen=True)
class Statement:
    """A run's statement, split by its mechanism's release schema: what its artefact
    releases, and the curator's part (keyed by its path), which never enters an artefact."""

    released: dict[str, Any]
    curator: dict[str, Any]


def split_statement(full: Mapping[str, Any], schema: Schema, path: str = "") -> Statement:
    """Fail-closed: a key is released only if ``schema`` names it (``PUBLIC``, or the
    schema of the mapping it holds); every other key, a new one included, goes to the
    curator's part. Each mechanism declares its schema beside the code that writes it."""
    released: dict[str, Any] = {}
    curator: dict[str, Any] = {}
    for key, value in full.items():
        where = f"{path}.{key}" if path else str(key)
        rule = schema.get(key)
        if rule is None:
            curator[where] = value
        elif rule == PUBLIC or value is None:
            released[key] = value
        elif isinstance(value, Mapping):
            inner = split_statement(value, rule, where)
            released[key] = inner.released
            curator.update(inner.curator)
        else:
            curator[where] = value  # a mapping was declared: anything else is not released
    return Statement(released, curator)


def release_statement(
    full: Mapping[str, Any], schema: Schema, out_dir: str | Path
) -> dict[str, Any]:
    """What ``full`` may release under ``schema``; its curator's part is written to the
    report beside ``out_dir`` (merged with what an earlier step wrote there)."""
    statement = split_statement(full, schema)
    if statement.curator:
        record_statistics(out_dir, statement.curator)
    return statement.released


# exact statistics of the private data that no release schema may name (tests/test_curator.py)
PRIVATE_STATISTICS = frozenset(
    {
        "token_usage",
        "redacted_token_fraction",
        "seconds",
        "screened_records",
        "records_left_out",
        "abstaining_teachers",
        "final_loss",
        "blocks",
        "tokens",
    }
)


def curator_report_path(out_dir: str | Path) -> Path:
    """``<out>.curator.json``: beside the artefact's folder, never inside it."""
    out = Path(out_dir)
    return out.with_name(f"{out.name}.curator.json")


def read_statistics(out_dir: str | Path) -> dict[str, Any]:
    """The statistics in the curator's report beside ``out_dir`` ({} when there is none)."""
    report = curator_report_path(out_dir)
    if not report.is_file():
        return {}
    statistics: dict[str, Any] = json.loads(report.read_text()).get("statistics", {})
    return statistics


def record_statistics(out_dir: str | Path, statistics: Mapping[str, Any]) -> None:
    """Merge ``statistics`` (top-level keys replace) into the curator's report beside
    ``out_dir``, atomically: a crash leaves the old report or the new one."""
    report = curator_report_path(out_dir)
    report.parent.mkdir(parents=True, exist_ok=True)
    body = {"note": CURATOR_NOTE, "statistics": {**read_statistics(out_dir), **statistics}}
    write_json_atomically(report, body)
