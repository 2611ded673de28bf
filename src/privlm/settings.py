"""Where privlm keeps its cache and finds its data.

- ``PRIVLM_CACHE``: converted models and tokenizers (default ``~/.cache/privlm``).
- ``PRIVLM_DATA``: the benchmark corpora (WikiText-2, SST-2, TREC, CB, RTE, AG News,
  CoNLL-2003), which do not ship with privlm (default: ``../shared/data`` beside a source
  checkout, when that exists, else ``$PRIVLM_CACHE/data``, where ``privlm data fetch``
  puts them). The perturbation vocabulary does ship with privlm.
"""

from __future__ import annotations

import os
from pathlib import Path

from privlm.errors import DataError, PrivlmError

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _cache_root() -> Path:
    raw = os.environ.get("PRIVLM_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "privlm"


def cache_dir() -> Path:
    """The cache directory, created on first use."""
    path = _cache_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetched_data_dir() -> Path:
    """Where ``privlm data fetch`` stores the corpora when ``PRIVLM_DATA`` is not set."""
    return _cache_root() / "data"


def data_target() -> Path:
    """Where fetched corpora go: ``PRIVLM_DATA`` when set, else :func:`fetched_data_dir`."""
    raw = os.environ.get("PRIVLM_DATA")
    return Path(raw).expanduser() if raw else fetched_data_dir()


def _default_data_candidates() -> list[Path]:
    """``../shared/data`` beside a source checkout (never looked for beside an installed
    privlm, nor relative to the working directory)."""
    if not (_REPO_ROOT / "pyproject.toml").is_file():
        return []
    return [_REPO_ROOT.parent / "shared" / "data"]


def data_dir() -> Path:
    """The directory holding the bundled corpora; raises :class:`DataError` if absent."""
    raw = os.environ.get("PRIVLM_DATA")
    if raw:
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise DataError(path, "PRIVLM_DATA points to a directory that does not exist")
        return path
    for candidate in [*_default_data_candidates(), fetched_data_dir()]:
        if candidate.is_dir():
            return candidate
    raise PrivlmError(
        "the benchmark corpora (WikiText-2, SST-2, TREC, CB, RTE, AG News, CoNLL-2003) do not "
        "ship with privlm: run `privlm data fetch` (or `privlm data fetch NAME`), or set "
        "PRIVLM_DATA to a folder holding them (the layout is in docs/data.md), or pass your "
        "own file where a command takes one"
    )
