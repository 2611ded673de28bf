"""A user's own detection rules from a file (``--patterns FILE``).

YAML or JSON, every entry with a label::

    patterns:                     # regular expressions (Python syntax)
      - {label: MRN, regex: "MRN[- ]?\\\\d{7}"}
    deny:                         # terms that are always sensitive (case-insensitive)
      - {label: PROJECT, terms: [Falcon, Osprey]}
    allow:                        # terms that are never sensitive, e.g. product names
      - {label: PRODUCT, terms: [Acme Cloud, Acme Pay]}

A detected span that lies inside an allowed term is dropped, whichever detector found it;
rule and deny matches are added to what the base detector finds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privlm.detect.base import Detector, Span, merge_spans
from privlm.errors import DataError

SECTIONS = ("patterns", "deny", "allow")


@dataclass(frozen=True)
class Rules:
    """Compiled rules: (label, pattern) to flag, and patterns of allowed terms."""

    flag: tuple[tuple[str, re.Pattern[str]], ...]
    allow: tuple[re.Pattern[str], ...]


def _terms_pattern(terms: Sequence[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def _entries(raw: dict[str, Any], section: str, path: Path) -> list[dict[str, Any]]:
    entries = raw.get(section) or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise DataError(path, f"'{section}' must be a list of entries with a label")
    for e in entries:
        if not isinstance(e.get("label"), str) or not e["label"].strip():
            raise DataError(path, f"every '{section}' entry needs a label: {e!r}")
    return entries


def _compile(e: dict[str, Any], path: Path) -> re.Pattern[str]:
    if not isinstance(e.get("regex"), str):
        raise DataError(path, f"pattern {e['label']!r} needs a 'regex' string")
    try:
        return re.compile(e["regex"], re.IGNORECASE if e.get("ignore_case") else 0)
    except re.error as err:
        raise DataError(path, f"pattern {e['label']!r}: bad regex: {err}") from err


def _terms(e: dict[str, Any], section: str, path: Path) -> re.Pattern[str]:
    terms = e.get("terms")
    if not isinstance(terms, list) or not terms or not all(isinstance(t, str) and t for t in terms):
        raise DataError(path, f"'{section}' entry {e['label']!r} needs a non-empty 'terms' list")
    return _terms_pattern(terms)


def load_rules(path: str | Path) -> Rules:
    """Read and check a rules file (module docstring); errors name the file and the entry."""
    p = Path(path)
    if not p.is_file():
        raise DataError(p, "no such rules file")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except (ValueError, ImportError) as err:  # json and yaml errors are ValueErrors
        raise DataError(p, f"not valid {p.suffix.lstrip('.') or 'YAML'}: {err}") from err
    except Exception as err:  # yaml.YAMLError
        raise DataError(p, f"not valid YAML: {err}") from err
    if not isinstance(raw, dict) or not any(raw.get(s) for s in SECTIONS):
        raise DataError(p, f"a rules file needs at least one of {', '.join(SECTIONS)}")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise DataError(p, f"unknown section(s) {unknown}; use {', '.join(SECTIONS)}")
    flag = [(e["label"], _compile(e, p)) for e in _entries(raw, "patterns", p)]
    flag += [(e["label"], _terms(e, "deny", p)) for e in _entries(raw, "deny", p)]
    allow = tuple(_terms(e, "allow", p) for e in _entries(raw, "allow", p))
    return Rules(tuple(flag), allow)


class RulesDetector:
    """``base`` plus a user's rules: their patterns and deny terms flagged, allowed terms
    never."""

    def __init__(self, base: Detector, rules: Rules, source: str = "rules") -> None:
        self.base, self.rules = base, rules
        self.name = f"{base.name}+{source}"

    def _one(self, text: str, found: Sequence[Span]) -> list[Span]:
        spans = list(found) + [
            Span(m.start(), m.end(), label)
            for label, p in self.rules.flag
            for m in p.finditer(text)
            if m.end() > m.start()
        ]
        allowed = [(m.start(), m.end()) for p in self.rules.allow for m in p.finditer(text)]
        kept = [s for s in spans if not any(b <= s.start and s.end <= e for b, e in allowed)]
        return merge_spans(kept)

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self._one(t, f) for t, f in zip(texts, self.base.detect(texts), strict=True)]
