"""File-system helpers shared by the layers (base layer: imports nothing of privlm)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_directory_atomically(target: Path, write: Callable[[Path], object]) -> None:
    """Run ``write(tmpdir)`` beside ``target`` and move the result into place only once it is
    complete, so a crash never leaves a half-written model or adapter where a reader looks."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        tmp.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, so a reader (or a
    crash) sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomically(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`write_text_atomically`)."""
    write_text_atomically(path, json.dumps(data, indent=2, default=str))
