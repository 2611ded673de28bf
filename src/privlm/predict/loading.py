"""Open a trained ensemble directory as an engine over its public model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privlm.models import LoadedModel, load_public_model
from privlm.predict.engine import EnsembleEngine
from privlm.training.ensemble import load_manifest


def load_ensemble(path: str | Path) -> tuple[LoadedModel, EnsembleEngine, dict[str, Any]]:
    """(public model, engine with every adapter, manifest), adapters in manifest order."""
    manifest = load_manifest(path)
    lm = load_public_model(manifest["model"], seed=0)
    dirs = [Path(path) / p["name"] for p in manifest["partition"]]
    # the engine wraps the model in place; a second copy stays the pure public model
    engine = EnsembleEngine.from_directories(load_public_model(manifest["model"]).model, dirs)
    return lm, engine, manifest
