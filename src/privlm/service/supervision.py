"""The job workers ``privlm serve`` starts, supervised: a worker that dies is started
again (at most ``max_restarts`` in ``window_s``, then the pool says it gave up), and the
new worker's first act (``Worker.recover``) puts the dead one's job back in the queue. The
pool's numbers are what ``/health`` and ``/metrics`` report (:mod:`privlm.service.health`).
The model is a job system's supervisor (Celery, RQ): work is never left with a dead
process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Spawn = Callable[[], Any]  # starts one worker; returns an object with poll(), terminate(), wait()


@dataclass
class WorkerPool:
    """``size`` workers started by ``spawn``, checked every ``every`` seconds."""

    spawn: Spawn
    size: int
    max_restarts: int = 10
    window_s: float = 600.0
    every: float = 1.0
    children: list[Any] = field(default_factory=list)
    restarts: int = 0
    gave_up: bool = False
    _recent: deque[float] = field(default_factory=deque)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of_command(cls, command: list[str], size: int, **kw: Any) -> WorkerPool:
        return cls(lambda: subprocess.Popen(command), size, **kw)

    def start(self) -> WorkerPool:
        self.children = [self.spawn() for _ in range(self.size)]
        threading.Thread(target=self._watch, name="privlm-workers", daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self.check()

    def check(self) -> int:
        """Start again each worker that has exited, within the restart rate; how many."""
        started = 0
        with self._lock:
            for i, child in enumerate(self.children):
                if child.poll() is None or self._stop.is_set():
                    continue
                now = time.monotonic()
                while self._recent and now - self._recent[0] > self.window_s:
                    self._recent.popleft()
                if len(self._recent) >= self.max_restarts:
                    if not self.gave_up:
                        print(f"privlm serve: a job worker died {len(self._recent)} times in "
                              f"{self.window_s:g} s; not starting it again", file=sys.stderr)  # fmt: skip
                    self.gave_up = True
                    continue
                print(f"privlm serve: job worker {i} exited ({child.poll()}); starting it again",
                      file=sys.stderr)  # fmt: skip
                self.children[i] = self.spawn()
                self._recent.append(now)
                self.restarts += 1
                started += 1
        return started

    def alive(self) -> int:
        with self._lock:
            return sum(child.poll() is None for child in self.children)

    def describe(self) -> dict[str, Any]:
        return {
            "expected": self.size, "alive": self.alive(), "restarts": self.restarts,
            "gave_up": self.gave_up,
        }  # fmt: skip

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        with self._lock:
            for child in self.children:
                child.terminate()
            for child in self.children:
                try:
                    child.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    child.kill()
