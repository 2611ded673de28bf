"""Errors privlm raises on purpose.

Every error a user can provoke (bad input, a refused charge, an unreachable model) is a
:class:`PrivlmError` whose message says what went wrong and what to do. The CLI prints
the message, never a traceback.
"""

from __future__ import annotations


class PrivlmError(Exception):
    """Base class of the errors privlm raises for a user to read."""


class DataError(PrivlmError, ValueError):
    """Input data that cannot be used: names the file, the line and the problem."""

    def __init__(
        self, path: object, problem: str, line: int | None = None, cli_hint: str = ""
    ) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem  # in any surface's terms: what the service answers
        self.cli_hint = cli_hint  # which CLI flags fix it: the CLI's message only
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}" + (f"; {cli_hint}" if cli_hint else ""))


class ModelLoadError(PrivlmError):
    """A model could not be loaded or prepared."""


class AccountingError(PrivlmError, ValueError):
    """Invalid privacy-accounting parameters (a negative σ, a δ outside (0, 1), ...)."""


class BudgetExceededError(PrivlmError):
    """A charge was refused because it would exceed the budget. Nothing was recorded."""
