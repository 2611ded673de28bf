"""OpenAI-compatible generation: ``POST /v1/completions`` and ``POST /v1/chat/completions``,
each with ``stream: true`` as server-sent events (issue 13 §4).

Every token is charged before it is sent: a stream is driven by the client, one token per
event, so a client that disconnects stops generation, and what was charged stays charged.
Nothing a client sends is silently ignored (:mod:`privlm.service.openai_fields`): a field that
would change what is released (log-probabilities, logit bias, a seed, other decoding) is
refused with the reason. ``stop`` works: stopping is post-processing and costs nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from privlm.service.api_errors import ApiError, invalid
from privlm.service.auth import MeBriefly
from privlm.service.db import Tenant, new_id
from privlm.service.deployments import (
    MAX_TOKENS,
    BudgetExhausted,
    DeploymentBusy,
    LoadedDeployment,
    Release,
)
from privlm.service.openai_fields import check_fields
from privlm.service.stop_text import StopText
from privlm.service.strict import STRICT_OPENAI_BODY

MAX_PROMPT_CHARS = 20_000


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class GenerationRequest(BaseModel):
    """The fields both endpoints share; any other field is checked by ``check_fields``."""

    model_config = STRICT_OPENAI_BODY
    model: str = Field(..., max_length=40)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None


class CompletionRequest(GenerationRequest):
    prompt: str | list[str]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(..., pattern="^(system|developer|user|assistant)$")
    content: str | list[dict[str, Any]]
    name: str | None = Field(None, max_length=64)


class ChatRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=256)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)


# -- requests to prompts ------------------------------------------------------------------------


def completion_prompt(req: CompletionRequest) -> str:
    prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
    if len(prompts) != 1:
        raise invalid("send one prompt per request")
    if len(prompts[0]) > MAX_PROMPT_CHARS:
        raise invalid(f"the prompt is limited to {MAX_PROMPT_CHARS:,} characters")
    return prompts[0]


def message_text(m: ChatMessage) -> str:
    if isinstance(m.content, str):
        return m.content
    parts = []
    for part in m.content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise invalid("message content parts must be text ({'type': 'text', 'text': ...})")
        parts.append(part["text"])
    return "".join(parts)


def chat_prompt(req: ChatRequest, tokenizer: Any) -> list[int]:
    """The conversation rendered by the model's own chat template, ending with the
    assistant's turn opened (``add_generation_prompt``)."""
    if not getattr(tokenizer, "chat_template", None):
        raise invalid(
            "this deployment's model has no chat template; use /v1/completions with a prompt"
        )
    messages = [
        {"role": "system" if m.role == "developer" else m.role, "content": message_text(m)}
        for m in req.messages
    ]
    if sum(len(m["content"]) for m in messages) > MAX_PROMPT_CHARS:
        raise invalid(f"the messages are limited to {MAX_PROMPT_CHARS:,} characters in all")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def end_of_turn_ids(tokenizer: Any) -> set[int]:
    """Special tokens the chat template writes (end of turn, start of turn): a chat answer
    ends when the model emits one."""
    template = tokenizer.chat_template or ""
    return {
        tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens if t in template
    } | {tokenizer.eos_token_id}


def stop_strings(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 4 or any(not s or len(s) > 256 for s in stops):
        raise invalid("stop takes up to 4 non-empty strings of at most 256 characters")
    return stops


# -- one answer, as text pieces -----------------------------------------------------------------


@dataclass
class Answer:
    """A release seen through ``stop`` (strings, and end-of-turn tokens for chat)."""

    release: Release
    stop: StopText
    stop_ids: set[int]
    finish_reason: str | None = None

    def pieces(self) -> Generator[str, None, None]:
        """Text as it is released; ends (and stops generating) at a stop."""
        try:
            for piece in self.release:
                if self.release.tokens and self.release.tokens[-1].id in self.stop_ids:
                    self.finish_reason = "stop"
                    break
                text = self.stop.feed(piece)
                if text:
                    yield text
                if self.stop.hit:
                    self.finish_reason = "stop"
                    break
            else:
                self.finish_reason = self.release.finish_reason
                tail = self.stop.flush()
                if tail:
                    yield tail
        finally:
            self.release.close()

    def usage(self) -> dict[str, int]:
        n, p = len(self.release.tokens), self.release.prompt_tokens
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

    def privlm(self) -> dict[str, Any]:
        r = self.release
        private = sum(t.private for t in r.tokens)
        return {
            "private_tokens": private, "public_tokens": len(r.tokens) - private,
            "fallback": r.fallback, "note": r.note,
        }  # fmt: skip


def first_piece(pieces: Iterator[str], dep: LoadedDeployment) -> str | None:
    """The first piece, computed before any response is sent, so that a request that can
    release nothing gets a 429 (or 503) rather than an empty stream."""
    try:
        return next(pieces)
    except StopIteration:
        return None
    except BudgetExhausted as exc:
        raise ApiError(429, "budget_exhausted", str(exc), budget=dep.budget()) from None
    except DeploymentBusy as exc:
        raise ApiError(503, "busy", str(exc)) from None


# -- response formats ---------------------------------------------------------------------------


@dataclass
class Format:
    """How one endpoint writes a whole response, a stream chunk and its last chunk."""

    object: str
    chunk_object: str
    chat: bool

    def choice(self, text: str, finish: str | None, *, delta: bool, first: bool = False) -> Any:
        if not self.chat:
            return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
        if not delta:
            message = {"role": "assistant", "content": text}
            return {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        d = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}


COMPLETION = Format("text_completion", "text_completion", chat=False)
CHAT = Format("chat.completion", "chat.completion.chunk", chat=True)


def whole(fmt: Format, model: str, answer: Answer, first: str | None) -> dict[str, Any]:
    text = (first or "") + "".join(answer.pieces())
    return {
        "id": new_id("chatcmpl" if fmt.chat else "cmpl"), "object": fmt.object,
        "created": int(time.time()), "model": model,
        "choices": [fmt.choice(text, answer.finish_reason, delta=False)],
        "usage": answer.usage(), "privlm": answer.privlm(),
    }  # fmt: skip


def event(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def sse(
    fmt: Format, model: str, answer: Answer, pieces: Generator[str, None, None], first: str | None,
    usage: bool,
) -> AsyncIterator[str]:  # fmt: skip
    """Server-sent events: one per released piece, then the finish, usage and [DONE].

    Each next piece is computed in a worker thread only when the previous one was handed to
    the server; a disconnect cancels this generator, and ``finally`` stops generation (the
    deployment's lock is released, nothing further is charged)."""
    head = {"id": new_id("chatcmpl" if fmt.chat else "cmpl"), "object": fmt.chunk_object,
            "created": int(time.time()), "model": model}  # fmt: skip
    try:
        text, opened = first, False
        while text is not None:
            if text or (fmt.chat and not opened):
                yield event(
                    {**head, "choices": [fmt.choice(text, None, delta=True, first=not opened)]}
                )
                opened = True
            text = await run_in_threadpool(next, pieces, None)
        last = {**head, "choices": [fmt.choice("", answer.finish_reason, delta=True)]}
        yield event({**last, "privlm": answer.privlm()})
        if usage:
            yield event({**head, "choices": [], "usage": answer.usage()})
        yield event("[DONE]")
    except Exception as exc:  # after the headers: report in the stream, never the content
        yield event({"error": {"type": "internal_error", "message": type(exc).__name__}})
    finally:
        pieces.close()


def respond(
    fmt: Format, req: GenerationRequest, dep: LoadedDeployment, prompt: str | list[int],
    stop_ids: set[int],
) -> Any:  # fmt: skip
    """Release an answer to ``prompt`` as one JSON body or as a stream of events."""
    max_tokens = req.max_tokens or 16
    if isinstance(req, ChatRequest) and req.max_completion_tokens is not None:
        max_tokens = req.max_completion_tokens
    release = dep.release(prompt, max_tokens)
    answer = Answer(release, StopText(stop_strings(req.stop)), stop_ids)
    pieces = answer.pieces()
    first = first_piece(pieces, dep)
    if not req.stream:
        return whole(fmt, req.model, answer, first)
    usage = bool(req.stream_options and req.stream_options.include_usage)
    return StreamingResponse(
        sse(fmt, req.model, answer, pieces, first, usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def mount_openai(app: FastAPI, loaded: Callable[[Tenant, str], LoadedDeployment]) -> None:
    """Add the two OpenAI generation endpoints; ``loaded`` finds the caller's deployment."""

    @app.post("/v1/completions", response_model=None)
    def completions(req: CompletionRequest, me: MeBriefly) -> Any:
        check_fields(req, chat=False)
        prompt = completion_prompt(req)
        dep = loaded(me, req.model)
        return respond(COMPLETION, req, dep, prompt, set())

    @app.post("/v1/chat/completions", response_model=None)
    def chat_completions(req: ChatRequest, me: MeBriefly) -> Any:
        check_fields(req, chat=True)
        dep = loaded(me, req.model)
        prompt = chat_prompt(req, dep.tokenizer)
        return respond(CHAT, req, dep, prompt, end_of_turn_ids(dep.tokenizer))
