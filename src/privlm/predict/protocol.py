"""One interface for everything that answers a prompt.

PMixED, SubMix, a DP-trained adapter and the public model all answer through
:class:`Predictor`: ``stream`` (tokens one at a time, each released only after its cost is
committed), ``generate`` (the same tokens collected), ``score`` (teacher-forced
log-probabilities) and ``budget``/``exhausted``. The CLI and the service build a predictor
once (:mod:`privlm.predict.factory`) and never branch on the mechanism's name again.

A stream is lazy: a token is computed, charged and released only when the consumer asks for
the next one. A consumer that stops asking (a client that disconnected) stops generation, and
what was charged stays charged.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from privlm.errors import PrivlmError
from privlm.predict.engine import CachedDecoder, EnsembleEngine
from privlm.predict.sampling import check_ancestral
from privlm.randomness import PrivacyRandomness


@dataclass(frozen=True)
class Token:
    """One released token. ``private``: drawn from the private mechanism and charged to its
    ledger; False for the public model (after SubMix's STOP, or a fallback) and for
    post-processing of an already private release (a DP-trained adapter). ``free``: a
    screened PMixED token the sparse-vector test sent to the public model; private (its
    test is covered by the deployment's charge), though it charged nothing itself."""

    id: int
    private: bool
    free: bool = False


@dataclass(frozen=True)
class Scores:
    """Teacher-forced log-probabilities (float64) of every token after the first, and how
    many of them were answered by the private mechanism (charged)."""

    log_probs: torch.Tensor
    private: int


@dataclass
class Generation:
    """Released tokens and what they cost."""

    text: str
    token_ids: list[int]
    epsilon_spent: float
    queries_used: int
    queries_left: int
    stopped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class TokenStream(Iterator[Token]):
    """The tokens of one generation, one at a time. After the last, ``stopped`` says why a
    private mechanism stopped early (None: end of sequence or the length asked for)."""

    def __init__(self, tokens: Generator[Token, None, str | None]) -> None:
        self._tokens = tokens
        self.stopped: str | None = None

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> Token:
        try:
            return next(self._tokens)
        except StopIteration as end:
            self.stopped = end.value
            raise

    def close(self) -> None:
        """Stop generating: no further token is computed or charged."""
        self._tokens.close()


class Sequence(Protocol):
    """One generation as a state machine, so that a driver decides where its forward passes
    run: alone (:func:`drive`, with a :class:`CachedDecoder`) or batched with other
    requests' (:class:`privlm.predict.batching.DecodeBatch`, the service's scheduler).

    The driver evaluates the next-token log-probabilities of ``rows`` (engine rows, −1 the
    public model) after the context and hands them to :meth:`choose`, which returns the
    released token, charged first, or None when the mechanism stops (``stopped`` says why).
    After a token, ``rows`` may have shrunk (a subsequence: rows no later step needs) and
    ``done`` says whether the generation is over."""

    rows: list[int]
    done: bool
    stopped: str | None

    def choose(self, log_probs: torch.Tensor) -> Token | None: ...


def kept_positions(before: list[int], after: list[int]) -> list[int]:
    """Positions in ``before`` of the rows of ``after`` (a subsequence of it).

    >>> kept_positions([-1, 2, 5, 7], [-1, 5])
    [0, 2]
    """
    position = {row: i for i, row in enumerate(before)}
    return [position[row] for row in after]


def drive(
    engine: EnsembleEngine, ids: list[int], seq: Sequence, reserve: int
) -> Generator[Token, None, str | None]:
    """Run ``seq`` alone with its own KV cache: each token is computed and charged only when
    the consumer asks for it. Returns why a private mechanism stopped early (or None)."""
    decoder = CachedDecoder(engine, ids, seq.rows, reserve)
    while True:
        token = seq.choose(decoder.last)
        if token is None:
            return seq.stopped
        yield token
        if seq.done:
            return seq.stopped
        before = decoder.rows.tolist()
        if len(seq.rows) < len(before):
            decoder.keep(kept_positions(before, seq.rows))
        decoder.advance(token.id)


@runtime_checkable
class Predictor(Protocol):
    """What the CLI and the service need from any way of answering a prompt.

    ``charges_tokens``: whether each private token is charged to a ledger (PMixED, SubMix),
    or tokens are free (the public model, a DP-trained adapter's post-processing)."""

    mechanism: str
    charges_tokens: bool
    tokenizer: Any
    rng: PrivacyRandomness  # the sampling noise: the OS CSPRNG unless a seed was given

    def prompt_ids(self, prompt: str) -> list[int]: ...

    def stream(self, prompt_ids: list[int], max_new_tokens: int) -> TokenStream: ...

    def sequence(self, prompt_ids: list[int], max_new_tokens: int) -> Sequence: ...

    def generate(self, prompt: str, max_new_tokens: int = 32, **sampling: Any) -> Generation: ...

    def score(self, token_ids: list[int]) -> Scores: ...

    def budget(self) -> dict[str, Any]: ...

    def exhausted(self) -> bool: ...


class StreamingPredictor:
    """``stream``, ``sequence`` and ``generate`` for predictors that implement
    ``_sequence`` (one generation as a :class:`Sequence`)."""

    mechanism: str
    tokenizer: Any
    engine: EnsembleEngine

    def stream(self, prompt_ids: list[int], max_new_tokens: int) -> TokenStream:
        """Up to ``max_new_tokens`` tokens after ``prompt_ids``, computed as they are asked
        for; :meth:`check_can_start` refuses at once what could release nothing."""
        seq = self.sequence(prompt_ids, max_new_tokens)
        return TokenStream(drive(self.engine, prompt_ids, seq, max_new_tokens))

    def sequence(self, prompt_ids: list[int], max_new_tokens: int) -> Sequence:
        """One generation of up to ``max_new_tokens`` tokens, for a driver to run (refused at
        once, by :meth:`check_can_start`, when it could release nothing)."""
        if max_new_tokens < 1:
            raise PrivlmError("max_new_tokens must be at least 1")
        if not prompt_ids:
            raise PrivlmError("the prompt must have at least one token")
        self.check_can_start()
        return self._sequence(max_new_tokens)

    def check_can_start(self) -> None:
        """Raise (with the reason) when a stream could release nothing; by default never."""

    def _sequence(self, max_new_tokens: int) -> Sequence:
        raise NotImplementedError

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's token ids without special tokens; an empty prompt is one EOS."""
        ids: list[int] = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return ids or [self.tokenizer.eos_token_id]

    def generate(self, prompt: str, max_new_tokens: int = 32, **sampling: Any) -> Generation:
        """Sample up to ``max_new_tokens`` tokens after ``prompt`` (ancestral sampling only:
        any other decoding option is refused with the reason)."""
        check_ancestral(sampling)
        tokens = self.stream(self.prompt_ids(prompt), max_new_tokens)
        released = list(tokens)
        return self.generation(released, tokens.stopped)

    def generation(self, released: list[Token], stopped: str | None) -> Generation:
        ids = [t.id for t in released]
        private = sum(t.private for t in released)
        return Generation(
            self.tokenizer.decode(ids), ids, 0.0, 0, 0, stopped,
            {"private_tokens": private, "public_tokens": len(ids) - private},
        )  # fmt: skip
