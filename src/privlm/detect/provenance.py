"""What a detector is, stated beside the guarantee that rests on it: its name, its version
and its measured recall on the held-out template families (docs/results.md).

JFT's selective-DP statement protects what the policy flags; whatever the detector misses is
trained on without noise in phase 1. ``privacy.json`` and the model card therefore carry
:func:`detector_record`: the figures come from ``heldout_recall.json``, written by
``bench/bench_detectors.py --record`` from a measurement on the held-out families and value
sources (:mod:`privlm.detect.pii_families_heldout`), never from the data being trained on.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from privlm.detect.base import Detector

MEASURED = Path(__file__).parent / "heldout_recall.json"
TAGGER_VERSION = "4"  # the default tagger's recipe (privlm.detect.tagger), cached by version
TAGGER_LAYER = 5  # the blocks it reads, chosen on development text (docs/results.md)
DEFAULT_SENTENCES = 6000  # its training sentences: the recipe docs/results.md measured
KEY_TYPES = ("PERSON", "STREET_ADDRESS", "GPE")


@lru_cache(maxsize=1)
def _measured() -> dict[str, Any]:
    if not MEASURED.is_file():
        return {}
    data: dict[str, Any] = json.loads(MEASURED.read_text())
    return data


def detector_version(name: str) -> str:
    """privlm's version, and the tagger's when the detector includes it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        privlm = version("privlm")
    except PackageNotFoundError:  # a source tree that was never installed
        privlm = "unknown"
    if "tagger" in name or name == "pii":
        return f"privlm {privlm}, tagger {TAGGER_VERSION}"
    return f"privlm {privlm}"


def detector_record(detector: Detector) -> dict[str, Any]:
    """Name, version and the measured held-out recall per type (None when this detector was
    not measured: a custom one, or a union privlm did not benchmark)."""
    measured = _measured().get("detectors", {}).get(detector.name)
    record: dict[str, Any] = {
        "name": detector.name,
        "version": detector_version(detector.name),
        "heldout_recall": None,
    }
    if measured is None:
        record["note"] = (
            "not measured on privlm's held-out families: measure it on your own annotated "
            "sample (privlm detect eval --data FILE, or JFT's --annotated)"
        )
        return record
    record["heldout_recall"] = measured["full_span_recall"]
    record["over_redaction"] = measured["over_redaction"]
    record["measured_on"] = _measured()["measured_on"]
    if "tagger" in detector.name or detector.name == "pii":
        record["tagger"] = tagger_record()
    return record


def tagger_record() -> dict[str, Any]:
    """The tagger the figures were measured with (recipe version, layer, precision), and
    the precision it runs in here: bfloat16 where the CPU has it, else int8."""
    from privlm.detect.tagger import feature_precision

    measured = dict(_measured().get("tagger", {}))
    here = measured["precision_here"] = feature_precision()
    if measured.get("precision") not in (None, here):
        measured["precision_note"] = (
            f"the held-out figures were measured with the tagger in {measured['precision']}; "
            f"here it runs in {here}, whose full-span recall on the same families differs by "
            "a few spans per type (docs/results.md, where pii's time goes)"
        )
    return measured


def recall_line(record: dict[str, Any]) -> str:
    """One line for a model card."""
    head = f"{record['name']} ({record['version']})"
    recall = record.get("heldout_recall")
    if not recall:
        return f"{head}; {record.get('note', 'not measured')}"
    shown = ", ".join(f"{t} {recall[t]:.2f}" for t in KEY_TYPES if t in recall)
    return (
        f"{head}; full-span recall on privlm's held-out template families: {shown} "
        "(docs/results.md): the rest of each type is trained on without noise in phase 1"
    )
