"""The CPU's name, as /proc/cpuinfo gives it, for the benchmarks' records (every speed
figure names its CPU)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
