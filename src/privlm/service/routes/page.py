"""The perturbation page, its public assets (the word vectors the browser perturbs with),
the form defaults and the health check: the routes that need no API key."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, PlainTextResponse, Response

from privlm.perturb import readability
from privlm.perturb.mechanisms import DEFAULT_CLIP
from privlm.perturb.vocabulary import load_glove
from privlm.service import datasets as ds_api
from privlm.service.api_errors import ApiError
from privlm.service.protocol import Defaults, Health, PerturbWords
from privlm.service.state import State

STATIC = Path(__file__).resolve().parents[1] / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@lru_cache(maxsize=8)
def vocabulary(size: int, clip: float) -> tuple[list[str], bytes]:
    v = load_glove(size, clip)
    return list(v.words), v.vectors.astype("<f4").tobytes()


def checked_clip(clip: float) -> float:
    if not (0 < clip <= 100):
        raise ApiError(400, "invalid_request", "clip must be in (0, 100]")
    return float(clip)


@router.get("/v1/perturb/words", response_model=PerturbWords)
def perturb_words(state: State, clip: float = DEFAULT_CLIP) -> dict[str, Any]:
    words, _ = vocabulary(state.settings.vocabulary, checked_clip(clip))
    return {"words": words, "dim": 50, "clip": clip, "source": "GloVe 6B 50d"}


@router.get(
    "/v1/perturb/vectors", response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}},
                     "description": "The word vectors: little-endian float32, dim per word"}},
)  # fmt: skip
def perturb_vectors(state: State, clip: float = DEFAULT_CLIP) -> Response:
    _, blob = vocabulary(state.settings.vocabulary, checked_clip(clip))
    return Response(blob, media_type="application/octet-stream")


@router.get("/v1/defaults", response_model=Defaults)
def defaults() -> dict[str, Any]:
    """The defaults the page's forms start from, read from the config classes (so the page
    never restates one)."""
    return {"dataset_budget": {"epsilon": ds_api.DEFAULT_BUDGET.epsilon,
                               "delta": ds_api.DEFAULT_BUDGET.delta},
            "perturbation": {m: perturbation_default(m) for m in ("laplace", "gaussian")}}  # fmt: skip


def perturbation_default(mechanism: str) -> dict[str, Any]:
    """The page's default ε per word for ``mechanism``, with the public measurement it is
    read from (privlm.perturb.readability)."""
    return {
        "epsilon": readability.default_epsilon(mechanism),
        "delta": readability.DEFAULT_DELTA if mechanism == "gaussian" else None,
        "readable_share": readability.READABLE_SHARE,
        "few_share": readability.FEW_SHARE,
        "most_share": readability.MOST_SHARE,
        "measured": [
            {"epsilon": e, "share_unchanged": s} for e, s in readability.points(mechanism)
        ],
    }


@router.get("/v1/health", response_model=Health)
@router.get("/health", include_in_schema=False)  # the path load balancers expect
async def health(state: State) -> dict[str, Any]:
    """A coroutine on the event loop: it never waits for a thread, the database, or
    generation (the numbers are a snapshot: privlm.service.health). ``degraded`` says why."""
    return {**state.health.report(), "model": state.settings.model}


@router.get("/metrics", include_in_schema=False, response_class=PlainTextResponse)
async def metrics(state: State) -> PlainTextResponse:
    """The same numbers as /health, in Prometheus' text format."""
    return PlainTextResponse(state.health.metrics(), media_type="text/plain; version=0.0.4")
