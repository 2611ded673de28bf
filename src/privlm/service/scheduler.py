"""Generation off the request threads: a scheduler per deployment, with admission control.

Each deployment has one scheduler thread and a queue. Admission is the service's
(:class:`~privlm.service.admission.TenantGate`): a tenant over its cap of completions in
flight (queued or running, all deployments together) gets 429, and a request that finds the
whole service at its bound gets 503, both at once with ``Retry-After``. Waiting
costs a request nothing but a queue entry: the HTTP side awaits events, holding no thread.

The scheduler decodes up to ``max_batch`` completions together
(:class:`~privlm.predict.batching.DecodeBatch`): one forward pass per step for all of them.
After each pass it visits the completions in the order they joined the batch (admission
order, but a long prompt joins when its prefill ends), and each one's mechanism
samples, charges (durably) and only then releases its token: the charges of one step are
made in that deterministic order, each before its token is sent.

A new completion's prompt is prefilled in chunks (:class:`~privlm.predict.engine.Prefill`),
at most ``prefill_chunk`` prompt tokens between two decoding steps: a long prompt slows the
completions already running but does not stop them, and it is cancelled or timed out between
chunks like any other work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from privlm.errors import PrivlmError
from privlm.predict.batching import DecodeBatch, Slot
from privlm.predict.engine import EnsembleEngine, Prefill
from privlm.predict.protocol import Sequence
from privlm.service.admission import SchedulerLimits, TenantGate
from privlm.service.release import Completion, Refused

log = logging.getLogger("privlm.service.scheduler")


class DeploymentScheduler:
    """The one thread that generates for a deployment; see the module's docstring."""

    def __init__(
        self, name: str, engine: EnsembleEngine, limits: SchedulerLimits, gate: TenantGate
    ) -> None:
        self.name, self.limits, self.gate = name, limits, gate
        self.batch = DecodeBatch(engine)
        self.owners: dict[int, Completion] = {}  # id(slot) → its completion
        self.pending: deque[Completion] = deque()
        self.rejoin: deque[Completion] = deque()  # switching to the public fallback
        self.prefilling: deque[tuple[Completion, Sequence, Prefill]] = deque()
        self.wake = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name=f"generate-{name}", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Admit nothing more; the thread ends once what it holds is done."""
        with self.wake:
            self.closed = True
            self.wake.notify()

    def submit(self, c: Completion) -> None:
        """Queue ``c`` or refuse at once (:class:`Overloaded`)."""
        with self.wake:
            if self.closed:
                raise PrivlmError(f"deployment {self.name} was stopped")
            self.gate.enter(c.tenant)  # the tenant's cap (429), then the service's (503)
            c.on_over = lambda: self.gate.leave(c.tenant)
            self.pending.append(c)
            self.wake.notify()

    def load(self) -> dict[str, int]:
        with self.wake:
            running = len(self.batch) + len(self.prefilling)
            return {"running": running, "queued": len(self.pending)}

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.wake:
                while not (self.pending or self.rejoin or self.prefilling or len(self.batch)):
                    if self.closed:
                        return
                    self.wake.wait()
            try:
                self._admit()
                self._prefill()
                self._choose()
                self.batch.step()
            except Exception as exc:  # a failed forward pass: fail what was running
                log.error("generation failed on %s: %s", self.name, type(exc).__name__)
                for slot in self.batch.slots:  # the batch itself is dropped, cache and all
                    c = self.owners.pop(id(slot))
                    c.fail(exc)
                    self._finish(c)
                self.batch = DecodeBatch(self.batch.engine)

    def _admit(self) -> None:
        """Fallback switches first, then the queue, up to ``max_batch`` (prefilling or
        decoding)."""
        while self.rejoin:
            c = self.rejoin.popleft()
            self._start(c, self._open(c, fallback=True), first=True)
        while len(self.batch) + len(self.prefilling) < self.limits.max_batch:
            with self.wake:
                if not self.pending:
                    return
                c = self.pending.popleft()
            if c.cancelled:
                self._finish(c)
            elif time.monotonic() > c.deadline:
                c.emit(Refused(503, "timeout", "the request waited past its deadline; retry"))
                self._finish(c)
            else:
                self._start(c, self._open(c))

    def _open(self, c: Completion, fallback: bool = False) -> Sequence | None:
        """The sequence that answers ``c`` (None, its end emitted, when none does)."""
        try:
            return c.open_fallback() if fallback else c.open()
        except Exception as exc:
            c.fail(exc)
            return None

    def _start(self, c: Completion, seq: Sequence | None, first: bool = False) -> None:
        """Begin ``c``'s prefill (refused at once if its KV cache cannot fit)."""
        if seq is None:
            self._finish(c)
            return
        try:
            prefill = Prefill(self.batch.engine, c.ids, seq.rows, c.max_tokens)
        except Exception as exc:
            c.fail(exc)
            self._finish(c)
            return
        if first:
            self.prefilling.appendleft((c, seq, prefill))
        else:
            self.prefilling.append((c, seq, prefill))

    def _prefill(self) -> None:
        """Up to ``prefill_chunk`` prompt tokens, oldest prefill first; each finished one
        joins the batch. A prefill's own failure fails its completion only."""
        budget = self.limits.prefill_chunk
        while self.prefilling and budget > 0:
            c, seq, prefill = self.prefilling[0]
            if c.cancelled or time.monotonic() > c.deadline:
                self.prefilling.popleft()
                if not c.cancelled:
                    c.expire()
                self._finish(c)
                continue
            try:
                budget -= prefill.advance(budget)
                slot = self.batch.join(seq, prefill) if prefill.finished else None
            except Exception as exc:  # the batch is untouched: join changes it last
                self.prefilling.popleft()
                c.fail(exc)
                self._finish(c)
                continue
            if slot is not None:
                self.prefilling.popleft()
                self.owners[id(slot)] = c

    def _choose(self) -> None:
        """Each completion in the order it joined: its token chosen, charged, then sent."""
        for slot in list(self.batch.slots):
            c = self.owners[id(slot)]
            if c.cancelled:
                self._finish(self._drop(slot))
                continue
            if time.monotonic() > c.deadline:
                c.expire()
                self._finish(self._drop(slot))
                continue
            try:
                action = c.take(slot.seq.choose(slot.last), slot.seq)
            except Exception as exc:
                self._drop(slot).fail(exc)
                self._finish(c)
                continue
            if action == "next":
                slot.pending = c.tokens[-1].id
            elif action == "fallback":
                self._drop(slot)
                self.rejoin.append(c)
            else:
                self._finish(self._drop(slot))

    def _drop(self, slot: Slot) -> Completion:
        self.batch.remove(slot)
        return self.owners.pop(id(slot))

    def _finish(self, c: Completion) -> None:
        c.close()  # frees the tenant's place if the completion did not end by itself
