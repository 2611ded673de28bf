"""Progress bars that can also be watched: a tqdm bar whose updates are forwarded to a
listener set for the current context (the service's worker records them as job progress).

``progress_bar(...)`` is a drop-in for ``tqdm(...)``; ``watch(listener)`` installs a
listener ``(desc, done, total)`` for the code run inside it.

Off a terminal (a log file, ``make demo … | tee``, CI) a bar degrades to plain lines: one
when it starts, one at most every :data:`PLAIN_INTERVAL_S` seconds and one when it ends,
with no carriage returns and no cursor movements (nested bars left ``[A`` escapes).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TextIO

from tqdm.auto import tqdm

PLAIN_INTERVAL_S = 30.0
_CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\r")
_BAR_BODY = re.compile(r"\|[^|]*\|")


class PlainLines:
    """A file for tqdm that writes each refresh of a bar as one line of its own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._last = ""

    def write(self, text: str) -> int:
        line = _CONTROL.sub("", text).strip()
        # a bar's progress is what comes before its timings ("[00:01<00:00, …]"), less
        # the bar's body, whose width follows the timings' length: the refresh tqdm makes
        # on closing a finished bar repeats it, and is left out
        progress = _BAR_BODY.sub("|", line.split("[", 1)[0]).strip()
        if line and progress != self._last:
            self.stream.write(line + "\n")
            self._last = progress
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _on_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def plain_unless_terminal(kwargs: dict[str, Any]) -> dict[str, Any]:
    """tqdm's arguments, made plain (:class:`PlainLines`, rare refreshes, ASCII, one
    position) where the bar's stream is not a terminal."""
    stream = kwargs.get("file") or sys.stderr
    if _on_terminal(stream) or isinstance(stream, PlainLines):
        return kwargs
    return {**kwargs, "file": PlainLines(stream), "mininterval": PLAIN_INTERVAL_S,
            "ascii": True, "ncols": 100, "position": 0, "dynamic_ncols": False}  # fmt: skip


Listener = Callable[[str, int, int | None], None]
_listener: ContextVar[Listener | None] = ContextVar("privlm_progress_listener", default=None)


class _WatchedBar(tqdm):  # type: ignore[misc]  # tqdm has no type stubs
    """Counts its own progress, so a listener hears it even when the bar is disabled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = plain_unless_terminal(kwargs)
        super().__init__(*args, **kwargs)
        self._desc = str(kwargs.get("desc") or "")  # a disabled tqdm keeps neither of these
        iterable = args[0] if args else kwargs.get("iterable")
        total = kwargs.get("total")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self._total = None if total is None else int(total)
        self._done = int(kwargs.get("initial", 0) or 0)
        self._notify()  # a listener learns the bar's total before its first step

    def _notify(self) -> None:
        listener = _listener.get()
        if listener is not None:
            listener(self._desc, self._done, self._total)

    def set_description(self, desc: str | None = None, refresh: bool | None = True) -> None:
        self._desc = str(desc or "")
        super().set_description(desc, refresh)

    def update(self, n: float | None = 1) -> bool | None:
        out: bool | None = super().update(n)
        self._done += int(n or 0)
        self._notify()
        return out

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            yield item
            self._done += 1
            self._notify()


def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """``tqdm(*args, **kwargs)``, reporting every update to the current listener (if any)."""
    return _WatchedBar(*args, **kwargs)


@contextmanager
def watch(listener: Listener) -> Iterator[None]:
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


class LossMeter:
    """The mean training loss of the examples seen since the last report, shown as a
    progress bar's postfix. It is a non-private statistic of the training data: shown to
    whoever runs the training (the data's holder), never written into an artefact, and
    never heard by a progress listener (the service records only steps)."""

    def __init__(self) -> None:
        self.total: Any = 0.0
        self.count = 0

    def add(self, loss_sum: Any, examples: int) -> None:
        """``loss_sum`` may be a detached tensor on the device: it is read back only once
        per report, not once per batch (no device sync in the training loop)."""
        self.total = self.total + loss_sum
        self.count += examples

    def report(self, bar: Any) -> None:
        if self.count:
            bar.set_postfix(loss=f"{float(self.total) / self.count:.3f}", refresh=False)
        self.total, self.count = 0.0, 0
