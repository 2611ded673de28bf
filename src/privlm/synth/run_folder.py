"""Where a synth run keeps its durable state, and the one check on it that needs no model:
torch-free, so ``privlm synth`` refuses a started run before any heavy import."""

from __future__ import annotations

from pathlib import Path

from privlm.errors import PrivlmError


def run_folder(out: Path) -> Path:
    """The run's private folder beside its output: state, key and per-text ledgers."""
    return out.with_name(f".{out.name}.synth")


def refuse_a_started_run(folder: Path, resume: bool) -> None:
    """Refuse to start over a run that ``folder`` holds, unless it is resumed: its budget
    was charged, and a new run would pay again."""
    if (folder / "state.json").is_file() and not resume:
        raise PrivlmError(
            f"{folder} holds a synth run already; resume it (--resume) or choose "
            "another --out (its budget was charged: a new run pays again)"
        )
