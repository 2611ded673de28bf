"""What leaves with an artefact, and what stays with the data's curator.

A released artefact (an adapter's ``privacy.json`` and model card, JFT's ``sdp.json``, a
student prompt's statement, the service's download) holds only the configured settings,
the privacy statement and quantities covered by its ε or public by declaration. Exact
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
# keys whose values are exact statistics of the private data, wherever they are nested
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


def split_private_statistics(
    statement: Mapping[str, Any], path: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what may be released, the exact statistics taken out of it, keyed by their path)."""
    released: dict[str, Any] = {}
    taken: dict[str, Any] = {}
    for key, value in statement.items():
        where = f"{path}.{key}" if path else str(key)
        if key in PRIVATE_STATISTICS:
            taken[where] = value
        elif isinstance(value, Mapping):
            released[key], inner = split_private_statistics(value, where)
            taken.update(inner)
        else:
            released[key] = value
    return released, taken


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


def release(statement: Mapping[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """The statement as it may be released; its exact statistics are written to the
    curator's report beside ``out_dir`` (merged with what an earlier step wrote there)."""
    released, taken = split_private_statistics(statement)
    if taken:
        record_statistics(out_dir, taken)
    return released
