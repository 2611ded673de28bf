"""Where privlm keeps its cache and finds its data.

- ``PRIVLM_CACHE``: converted models and tokenizers (default ``~/.cache/privlm``).
- ``PRIVLM_DATA``: the bundled corpora (default ``../shared/data`` beside the repository
  when that exists).
"""

from __future__ import annotations

import os
from pathlib import Path

from privlm.errors import DataError

_REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """The cache directory, created on first use."""
    raw = os.environ.get("PRIVLM_CACHE")
    path = Path(raw).expanduser() if raw else Path.home() / ".cache" / "privlm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _default_data_candidates() -> list[Path]:
    return [_REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]


def data_dir() -> Path:
    """The directory holding the bundled corpora; raises :class:`DataError` if absent."""
    raw = os.environ.get("PRIVLM_DATA")
    if raw:
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise DataError(path, "PRIVLM_DATA points to a directory that does not exist")
        return path
    for candidate in _default_data_candidates():
        if candidate.is_dir():
            return candidate
    raise DataError(
        _default_data_candidates()[0],
        "no data directory found; set PRIVLM_DATA to the folder holding the corpora "
        "(the one with MANIFEST.md)",
    )
