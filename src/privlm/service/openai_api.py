"""OpenAI-compatible generation: ``POST /v1/completions`` and ``POST /v1/chat/completions``,
each with ``stream: true`` as server-sent events.

Every token is charged before it is sent (the deployment's scheduler charges, then emits). A
client that disconnects, streaming or not, cancels its completion: the scheduler stops it at
its next step, and what was charged stays charged.
Nothing a client sends is silently ignored (:mod:`privlm.service.openai_fields`): a field that
would change what is released (log-probabilities, logit bias, a seed, other decoding) is
refused with the reason. ``stop`` works: stopping is post-processing and costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from privlm.service.admission import Overloaded
from privlm.service.api_errors import ApiError, invalid, require_encodable
from privlm.service.auth import MeBriefly
from privlm.service.db import Tenant, new_id
from privlm.service.deployments import LoadedDeployment
from privlm.service.openai_fields import check_fields
from privlm.service.protocol import ChatCompletionAnswer, CompletionAnswer, streamed
from privlm.service.release import MAX_TOKENS, Completion, Event, Finished, Piece, Refused
from privlm.service.routes.deployments import loaded_deployment
from privlm.service.state import State
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
    return require_encodable(prompts[0], "the prompt")


def message_text(m: ChatMessage) -> str:
    if isinstance(m.content, str):
        return require_encodable(m.content, "a message")
    parts = []
    for part in m.content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise invalid("message content parts must be text ({'type': 'text', 'text': ...})")
        parts.append(require_encodable(part["text"], "a message"))
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
    return [require_encodable(s, "a stop string") for s in stops]


# -- one answer, as events from the deployment's scheduler ----------------------------------------


class Channel:
    """Events of one completion, from the scheduler thread to this request's event loop.
    Waiting on it holds no thread."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def put(self, event: Event) -> None:
        """Called on the scheduler thread."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the client is gone
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def get(self, timeout: float) -> Event:
        return await asyncio.wait_for(self.queue.get(), timeout)


class ClientGone(Exception):
    """The client disconnected before its answer was complete."""


async def disconnected(request: Request) -> None:
    """Returns when the client disconnects; its body has been read already, so the next
    message the server has for this request is ``http.disconnect``."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(work: Any, gone: asyncio.Future[None]) -> Any:
    """``await work``, or :class:`ClientGone` if the client disconnects first."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()  # scheduled, not yet done: wait for it to finish cancelling
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientGone
    return task.result()


def refusal(event: Refused) -> ApiError:
    return ApiError(event.status, event.kind, event.message, **event.extra)


def check_prompt_length(n_prompt: int, max_tokens: int, dep: LoadedDeployment) -> None:
    """A prompt may take the model's context less the tokens asked for."""
    room = dep.context_tokens - max_tokens
    if n_prompt > room:
        raise invalid(
            f"the prompt has {n_prompt:,} tokens; this deployment's model takes "
            f"{dep.context_tokens:,} tokens in all, so with max_tokens={max_tokens} a prompt may "
            f"have at most {max(room, 0):,}"
        )


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


async def collect(channel: Channel, first: Event, timeout: float) -> tuple[str, Finished]:
    """All the text of a completion and its end."""
    parts, event = [], first
    while not isinstance(event, Finished):
        if isinstance(event, Refused):  # an internal error after the first token
            raise refusal(event)
        parts.append(event.text)
        event = await channel.get(timeout)
    return "".join(parts), event


def whole(fmt: Format, model: str, text: str, end: Finished) -> dict[str, Any]:
    """The whole answer, checked against its declared shape (:mod:`privlm.service.protocol`):
    a field it does not declare is an error, never sent."""
    body = {
        "id": new_id("chatcmpl" if fmt.chat else "cmpl"), "object": fmt.object,
        "created": int(time.time()), "model": model,
        "choices": [fmt.choice(text, end.finish_reason, delta=False)],
        "usage": end.usage, "privlm": end.privlm,
    }  # fmt: skip
    answer = ChatCompletionAnswer if fmt.chat else CompletionAnswer
    return answer.model_validate(body).model_dump(exclude_unset=True)


def event(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


async def sse(
    fmt: Format, model: str, channel: Channel, first: Event, completion: Completion,
    usage: bool, timeout: float,
) -> AsyncIterator[str]:  # fmt: skip
    """Server-sent events: one per released piece, then the finish, usage and [DONE].

    A disconnect cancels this generator, and ``finally`` cancels the completion: the
    scheduler stops it at its next step, and nothing further is charged."""
    head = {"id": new_id("chatcmpl" if fmt.chat else "cmpl"), "object": fmt.chunk_object,
            "created": int(time.time()), "model": model}  # fmt: skip
    try:
        item, opened = first, False
        while isinstance(item, Piece):
            if item.text or (fmt.chat and not opened):
                choice = fmt.choice(item.text, None, delta=True, first=not opened)
                yield event({**head, "choices": [choice]})
                opened = True
            item = await channel.get(timeout)
        if isinstance(item, Refused):
            yield event({"error": {"type": item.kind, "message": item.message}})
            return
        last = {**head, "choices": [fmt.choice("", item.finish_reason, delta=True)]}
        yield event({**last, "privlm": item.privlm})
        if usage:
            yield event({**head, "choices": [], "usage": item.usage})
        yield event("[DONE]")
    except Exception as exc:  # after the headers: report in the stream, never the content
        yield event({"error": {"type": "internal_error", "message": type(exc).__name__}})
    finally:
        completion.cancelled = True  # a no-op once it is over


def max_tokens_of(req: GenerationRequest) -> int:
    if isinstance(req, ChatRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens or 16


async def respond(
    fmt: Format, req: GenerationRequest, dep: LoadedDeployment, ids: list[int],
    stop_ids: set[int], me: Tenant, request: Request,
) -> Any:  # fmt: skip
    """Queue the completion on the deployment's scheduler, and answer with one JSON body
    or a stream of events. The first event is awaited before any response is sent, so a
    request that can release nothing gets its error status (429 budget, 503 full).

    A client that disconnects while it waits (queued, or for a whole answer) cancels its
    completion, so its budget is not spent on tokens nobody receives; a stream watches for
    the disconnect itself (:func:`sse`)."""
    max_tokens, deadline_s = max_tokens_of(req), dep.scheduler.limits.deadline_s
    check_prompt_length(len(ids), max_tokens, dep)
    channel = Channel()
    completion = Completion(
        dep, ids, max_tokens, stops=stop_strings(req.stop), stop_ids=stop_ids, emit=channel.put,
        tenant=me.id, deadline_s=deadline_s,
    )  # fmt: skip
    try:
        dep.scheduler.submit(completion)
    except Overloaded as exc:
        kind = "rate_limited" if exc.status == 429 else "overloaded"
        raise ApiError(
            exc.status, kind, exc.message, headers={"Retry-After": str(exc.retry_after)}
        ) from None
    timeout = deadline_s + 60  # the scheduler ends every completion by its deadline
    gone = asyncio.ensure_future(disconnected(request))
    try:
        first = await unless_gone(channel.get(timeout), gone)
        if isinstance(first, Refused):
            raise refusal(first)
        if not req.stream:
            text, end = await unless_gone(collect(channel, first, timeout), gone)
            return whole(fmt, req.model, text, end)
    except ClientGone:
        completion.cancelled = True
        return Response(status_code=499)  # nobody reads it: nginx's "client closed request"
    except BaseException:
        completion.cancelled = True
        raise
    finally:
        gone.cancel()  # a stream's response listens for the disconnect itself
    usage = bool(req.stream_options and req.stream_options.include_usage)
    return StreamingResponse(
        sse(fmt, req.model, channel, first, completion, usage, timeout),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


router = APIRouter(prefix="/v1")


@router.post("/completions", response_model=None, responses=streamed(CompletionAnswer))
async def completions(req: CompletionRequest, me: MeBriefly, request: Request, state: State) -> Any:
    """A coroutine: a request waiting for its tokens holds no thread."""
    check_fields(req, chat=False)
    prompt = completion_prompt(req)
    stop_strings(req.stop)  # every check of the request before any work
    dep = await run_in_threadpool(loaded_deployment, state, me, req.model)
    ids = await run_in_threadpool(dep.predictor.prompt_ids, prompt)
    return await respond(COMPLETION, req, dep, ids, set(), me, request)


@router.post("/chat/completions", response_model=None, responses=streamed(ChatCompletionAnswer))
async def chat_completions(req: ChatRequest, me: MeBriefly, request: Request, state: State) -> Any:
    check_fields(req, chat=True)
    for m in req.messages:
        message_text(m)
    stop_strings(req.stop)  # every check of the request before any work
    dep = await run_in_threadpool(loaded_deployment, state, me, req.model)
    ids = await run_in_threadpool(chat_prompt, req, dep.tokenizer)
    stop_ids = end_of_turn_ids(dep.tokenizer)
    return await respond(CHAT, req, dep, ids, stop_ids, me, request)
