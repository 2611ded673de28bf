"""One completion as the scheduler runs it: which sequence answers (the private mechanism,
or the public model when the budget is spent and the deployment allows it), and the text its
tokens become, seen through ``stop``.

A :class:`Completion` is driven by the deployment's scheduler thread
(:mod:`privlm.service.scheduler`): the scheduler evaluates the sequence's rows, the sequence
charges and returns a token, and only then does :meth:`Completion.take` turn it into text and
hand it to the client's channel. Nothing here runs on a request thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.protocol import Sequence, Token
from privlm.service.stop_text import StopText

if TYPE_CHECKING:
    from privlm.service.deployments import LoadedDeployment

MAX_TOKENS = 256


class BudgetExhausted(PrivlmError):
    """The deployment's privacy budget is spent and it has no public fallback."""


@dataclass(frozen=True)
class Piece:
    """Text released to the client (possibly empty: a character still incomplete)."""

    text: str


@dataclass(frozen=True)
class Finished:
    """The completion is over: why, and what it released."""

    finish_reason: str
    usage: dict[str, int]
    privlm: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    """Nothing was released: the HTTP status, error type and message to answer with."""

    status: int
    kind: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)


Event = Piece | Finished | Refused


class Completion:
    """A completion of ``ids`` of up to ``max_tokens`` tokens for ``tenant``; each event
    (piece, end, refusal) goes to ``emit``. ``cancel`` (a client that went away) stops it at
    the next step; what was charged stays charged."""

    def __init__(
        self, deployment: LoadedDeployment, ids: list[int], max_tokens: int, *,
        stops: list[str], stop_ids: set[int], emit: Callable[[Event], None], tenant: str,
        deadline_s: float,
    ) -> None:  # fmt: skip
        if not (1 <= max_tokens <= MAX_TOKENS):
            raise PrivlmError(f"max_tokens must be between 1 and {MAX_TOKENS}")
        self.deployment, self.ids, self.max_tokens = deployment, ids, max_tokens
        self.stop, self.stop_ids, self.emit, self.tenant = StopText(stops), stop_ids, emit, tenant
        self.deadline_s = deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.tokens: list[Token] = []
        self.fallback = False
        self.note: str | None = None
        self.cancelled = False
        self.over = False
        self.on_over: Callable[[], None] | None = None  # the scheduler's: frees its place
        self._text = ""

    # -- which sequence answers --------------------------------------------------------------

    def open(self) -> Sequence | None:
        """The private sequence, or the public fallback's when the budget is spent; None
        (after a refusal was emitted) when nothing can be released."""
        dep = self.deployment
        predictor = dep.predictor
        if not predictor.charges_tokens:
            self.note = predictor.budget().get("note")
        if not predictor.exhausted():
            try:
                return predictor.sequence(self.ids, self.max_tokens)
            except BudgetExceededError:
                pass
        return self.open_fallback()

    def open_fallback(self) -> Sequence | None:
        """The public model's sequence, flagged, when the deployment allows it; else refuse."""
        dep = self.deployment
        if not dep.row.fallback:
            self._end_refused(
                Refused(
                    429, "budget_exhausted",
                    f"the privacy budget of deployment {dep.row.id} is spent "
                    f"({dep.spent_text()}); no further private tokens can be released",
                    {"budget": dep.budget()},
                )
            )  # fmt: skip
            return None
        self.fallback = True
        self.note = "the privacy budget is spent: this answer comes from the public model alone"
        return dep.public.sequence(self.ids, self.max_tokens)

    # -- one token ---------------------------------------------------------------------------

    def take(self, token: Token | None, seq: Sequence) -> str:
        """What to do after ``seq`` chose ``token`` (already charged if private):
        ``"next"`` (decode another), ``"fallback"`` (answer from the public model instead;
        nothing was released) or ``"end"``."""
        charges = self.deployment.predictor.charges_tokens and not self.fallback
        if token is None or (charges and not token.private and not self.deployment.row.fallback):
            # the mechanism stopped (PMixED out of queries; SubMix after STOP without fallback)
            if not self.tokens:
                return "fallback"
            self.note = (
                "the private budget ran out (STOP): only the tokens charged leave"
                if token is not None
                else seq.stopped
            )
            self._send(self.stop.flush())
            self._end("budget_exhausted" if len(self.tokens) < self.max_tokens else "length")
            return "end"
        self.tokens.append(token)
        if token.id in self.stop_ids:  # end of turn: held text was no stop string
            self._send(self.stop.flush())
            self._end("stop")
            return "end"
        text = self.stop.feed(self._piece())
        if self.stop.hit:
            self._send(text)
            self._end("stop")
            return "end"
        self._send(text)
        if seq.done:
            if seq.stopped is not None and not self.fallback:
                self.note = seq.stopped
            self._send(self.stop.flush())
            self._end(self._finish(seq.stopped is not None))
            return "end"
        return "next"

    def expire(self) -> None:
        """The request's deadline passed: end with what was released (refuse, if nothing)."""
        if not self.tokens:
            self._end_refused(
                Refused(503, "timeout", f"no token within the request's deadline "
                        f"({self.deadline_s:g} s); retry when the deployment is less busy")
            )  # fmt: skip
            return
        self.note = f"the request's deadline ({self.deadline_s:g} s) passed"
        self._send(self.stop.flush())
        self._end("length")

    def _piece(self) -> str:
        """The text the last token adds, held back while it ends in an incomplete character."""
        text: str = self.deployment.tokenizer.decode(
            [t.id for t in self.tokens], skip_special_tokens=True
        )
        if text.endswith("\ufffd") and len(self.tokens) < self.max_tokens:
            return ""
        piece, self._text = text[len(self._text) :], text
        return piece

    def _finish(self, stopped: bool) -> str:
        if self.tokens and self.tokens[-1].id == self.deployment.tokenizer.eos_token_id:
            return "stop"
        return "budget_exhausted" if stopped and len(self.tokens) < self.max_tokens else "length"

    # -- events ------------------------------------------------------------------------------

    def _send(self, text: str) -> None:
        self.emit(Piece(text))

    def _end(self, reason: str) -> None:
        private = sum(t.private for t in self.tokens)
        n, p = len(self.tokens), len(self.ids)
        if self.deployment.predictor.charges_tokens and private < n:
            self.fallback = True  # public tokens in a private answer: SubMix after STOP
        self.close()
        self.emit(
            Finished(
                reason,
                {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n},
                {"private_tokens": private, "public_tokens": n - private,
                 "fallback": self.fallback, "note": self.note,
                 **self._free_tokens()},
            )
        )  # fmt: skip

    def _free_tokens(self) -> dict[str, int]:
        """Screened PMixED: how many private tokens its screen answered from the public
        model (free; covered by the deployment's charge); nothing for other mechanisms."""
        free = sum(t.free for t in self.tokens)
        return {"free_tokens": free} if free else {}

    def _end_refused(self, refusal: Refused) -> None:
        self.close()
        self.emit(refusal)

    def close(self) -> None:
        """Over: its place (queue, tenant's cap) is freed, once, before the client hears the
        end, so a client that sends its next request at once finds the place free."""
        if not self.over:
            self.over = True
            if self.on_over is not None:
                self.on_over()

    def fail(self, exc: BaseException) -> None:
        """An internal error: reported by type, never with the content."""
        if not self.over:
            self._end_refused(Refused(500, "internal_error", type(exc).__name__))
