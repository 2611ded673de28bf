"""Open a trained ensemble directory as an engine over its public model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privlm.models import LoadedModel, load_public_model
from privlm.models.placement import DeviceSpec, DtypeSpec
from privlm.models.pool import ModelPool
from privlm.predict.engine import EnsembleEngine
from privlm.training.ensemble import load_manifest


def load_ensemble(
    path: str | Path,
    device: DeviceSpec = "auto",
    dtype: DtypeSpec = "auto",
    pool: ModelPool | None = None,
) -> tuple[LoadedModel, EnsembleEngine, dict[str, Any]]:
    """(public model, engine with every adapter, manifest), adapters in manifest order.

    The public model is loaded once: the engine wraps its projections in place, and the
    wrapped model, called directly (no adapter rows), computes exactly the public model.
    """
    manifest = load_manifest(path)
    if pool is not None:  # shared with the pool's other engines on this model
        lm = pool.get(manifest["model"], device, dtype)
    else:
        lm = load_public_model(manifest["model"], device, dtype)
    dirs = [Path(path) / p["name"] for p in manifest["partition"]]
    engine = EnsembleEngine.from_directories(lm.model, dirs)
    return lm, engine, manifest
