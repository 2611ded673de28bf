"""File-system helpers shared by the layers (base layer: imports nothing of privlm)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


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
