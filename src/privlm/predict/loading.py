"""Open what a predictor serves: a trained ensemble, or one DP-trained adapter, as an engine
over its public model (:class:`LoadedEnsemble`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from privlm.models import LoadedModel, load_public_model
from privlm.models.placement import DeviceSpec, DtypeSpec
from privlm.models.pool import ModelPool
from privlm.predict.engine import EnsembleEngine
from privlm.predict.in_context import InContextEngine
from privlm.training.manifest import EnsembleManifest, load_manifest


class LoadedEnsemble(NamedTuple):
    """The public model, the engine holding the members' adapters (in manifest order), and
    the ensemble's manifest (None for one adapter served alone)."""

    model: LoadedModel
    engine: EnsembleEngine
    manifest: EnsembleManifest | None


def _public_model(
    name: str, device: DeviceSpec, dtype: DtypeSpec, pool: ModelPool | None
) -> LoadedModel:
    if pool is not None:  # shared with the pool's other engines on this model
        return pool.get(name, device, dtype)
    return load_public_model(name, device, dtype)


def load_ensemble(
    path: str | Path,
    device: DeviceSpec = "auto",
    dtype: DtypeSpec = "auto",
    pool: ModelPool | None = None,
) -> LoadedEnsemble:
    """The ensemble in ``path`` (made by ``train_ensemble``), members in manifest order:
    LoRA adapters stacked, or in-context members' prompts.

    The public model is loaded once: the engine wraps its projections in place, and the
    wrapped model, called directly (no adapter rows), computes exactly the public model.
    """
    manifest = load_manifest(path)
    lm = _public_model(manifest.model, device, dtype, pool)
    if manifest.member_kind == "in-context":
        prompts = json.loads(manifest.prompts_path(path).read_text())["prompts"]
        tok = lm.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        # every prompt padded to the declared width, never to the longest prompt: the
        # longest is a function of the private records, and the rounding of every row moves
        # with the padded width (docs/sharp_edges.md, "In-context members")
        engine: EnsembleEngine = InContextEngine(
            lm.model, prompts, pad or 0, width=manifest.prompt_tokens
        )
    else:
        engine = EnsembleEngine.from_directories(lm.model, manifest.member_dirs(path))
    return LoadedEnsemble(lm, engine, manifest)


def load_adapter(
    path: str | Path,
    model: str,
    device: DeviceSpec = "auto",
    dtype: DtypeSpec = "auto",
    pool: ModelPool | None = None,
) -> LoadedEnsemble:
    """One LoRA adapter (a DP-SGD or JFT release) on its public model ``model``."""
    lm = _public_model(model, device, dtype, pool)
    return LoadedEnsemble(lm, EnsembleEngine.from_directories(lm.model, [Path(path)]), None)
