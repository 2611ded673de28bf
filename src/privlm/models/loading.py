"""Load a public model by short name, local directory or Hugging Face hub id."""

from __future__ import annotations

import copy
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from privlm.errors import ModelLoadError
from privlm.models.gguf_package import load_gguf_tokenizer, prepare_gguf_model
from privlm.models.known_warnings import quiet_library_bars_off_terminal, silence_known_warnings
from privlm.models.memory import model_bytes, require_fits
from privlm.models.placement import (
    CPU_FLOAT32,
    DeviceSpec,
    DtypeSpec,
    Placement,
    model_placement,
    resolve_placement,
)
from privlm.models.registry import DEFAULT_MODEL, KNOWN_MODELS
from privlm.models.tiny import build_tiny_model

silence_known_warnings()  # every model privlm wraps in peft passes through here
quiet_library_bars_off_terminal()


@dataclass
class LoadedModel:
    """A causal LM in eval mode with its tokenizer, and where it came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    source: str
    loaded_as: str = ""
    """What :func:`load_public_model` was given (a short name, a hub id, or a directory's
    absolute path): what a job records so that the model can be loaded again."""

    @property
    def placement(self) -> Placement:
        return model_placement(self.model)

    @property
    def reference(self) -> str:
        """The name a job records for this model (in privacy.json and a manifest): what it was
        loaded as, else the model's own ``name_or_path``, else its name."""
        return self.loaded_as or str(getattr(self.model, "name_or_path", "") or self.name)


ModelSource = str | LoadedModel
"""What a training job accepts: a name (short name, hub id or directory) or a loaded model."""


def _load_kwargs(place: Placement) -> dict[str, object]:
    """Weights straight to their device and dtype, shard by shard (low CPU memory)."""
    out: dict[str, object] = {"dtype": place.dtype, "low_cpu_mem_usage": True}
    if place.device.type == "cuda":
        out["device_map"] = {"": str(place.device)}
    return out


def _check_model_fits(config: object, place: Placement, what: str) -> None:
    require_fits(
        model_bytes(config, place.dtype), place.device, f"the model {what}",
        "use a smaller model, --dtype bfloat16, or another device",
    )  # fmt: skip


def _from_directory(path: Path, place: Placement) -> LoadedModel:
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path}: not a model directory (no config.json)")
    try:
        _check_model_fits(AutoConfig.from_pretrained(str(path)), place, str(path))
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            str(path), local_files_only=True, **_load_kwargs(place)
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: could not load a causal LM from it: {exc}") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return LoadedModel(model.eval(), tok, path.name, str(path))


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint accepts a TCP connection (saves minutes of retries)."""
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _from_hub(model_id: str, place: Placement) -> LoadedModel:
    last: Exception | None = None
    for local_only in (True, False):
        if not local_only and not _hub_reachable():
            last = ConnectionError("the Hugging Face hub is unreachable from this machine")
            break
        try:
            config = AutoConfig.from_pretrained(model_id, local_files_only=local_only)
            _check_model_fits(config, place, model_id)
            tok = AutoTokenizer.from_pretrained(model_id, local_files_only=local_only)
            model = AutoModelForCausalLM.from_pretrained(
                model_id, local_files_only=local_only, **_load_kwargs(place)
            )
        except (OSError, ValueError) as exc:
            last = exc
            continue
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return LoadedModel(model.eval(), tok, model_id, f"hf:{model_id}")
    known = ", ".join(sorted(KNOWN_MODELS))
    raise ModelLoadError(
        f"could not fetch {model_id!r} from the Hugging Face hub, and it is not in the local "
        f"cache ({last}). If this machine has no access to the hub, download "
        "the model elsewhere and pass its local directory instead (a folder with config.json "
        f"and the weights). Models privlm ships by name: {known}."
    )


def load_tokenizer(name: str = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    """The tokenizer of a named model (``tiny`` shares SmolLM2's)."""
    spec = KNOWN_MODELS.get(name)
    if spec is None:
        return load_public_model(name, **CPU_FLOAT32).tokenizer
    return load_gguf_tokenizer(KNOWN_MODELS[DEFAULT_MODEL] if spec.kind == "tiny" else spec)


def load_public_model(
    name_or_path: str = DEFAULT_MODEL,
    device: DeviceSpec = "auto",
    dtype: DtypeSpec = "auto",
    seed: int = 0,
) -> LoadedModel:
    """Load the public model p₀ by short name (see ``privlm models list``), local
    directory, or Hugging Face hub id, placed by :mod:`privlm.models.placement`: ``auto``
    is CUDA in bfloat16 when a GPU is there, the CPU in float32 otherwise.

    >>> lm = load_public_model("tiny", device="cpu")
    >>> lm.model.config.num_hidden_layers, lm.model.config.hidden_size
    (2, 64)
    >>> lm.placement.describe()["dtype"]
    'float32'
    """
    loaded = _load(name_or_path, resolve_placement(device, dtype), seed)
    # what a saved adapter's base_model_name_or_path says: an id or path plain PEFT can load
    origin = base_model_id(name_or_path)
    loaded.model.config._name_or_path = origin
    loaded.model.name_or_path = origin  # what PEFT records (get_peft_model reads it)
    loaded.loaded_as = reference_of(name_or_path)
    return loaded


def reference_of(source: ModelSource) -> str:
    """The name a job records for a model so that it can be loaded again: a short name or hub
    id as given, a directory by its absolute path, a loaded model by its ``reference``."""
    if isinstance(source, LoadedModel):
        return source.reference
    path = Path(source).expanduser()
    return str(path.resolve()) if source not in KNOWN_MODELS and path.exists() else source


# the attribute where private prediction's engines keep the router of the projections they
# wrapped (privlm.predict.engine): a model that carries one is shared with deployments
ROUTER_ATTRIBUTE = "_privlm_router"


def working_copy(source: ModelSource, device: DeviceSpec, dtype: DtypeSpec) -> LoadedModel:
    """A model a training job may change, placed as the job's config says: loaded from a
    name, or a copy of a loaded model. PEFT wraps its model in place (it inserts the LoRA
    layers and freezes the base weights), so a caller's loaded model is copied, never
    changed; the copy costs the model's memory once more for the duration of the job.

    >>> lm = load_public_model("tiny", device="cpu")
    >>> copy_ = working_copy(lm, "cpu", "float32")
    >>> copy_.model is lm.model, copy_.reference
    (False, 'tiny')
    """
    if isinstance(source, str):
        return load_public_model(source, device, dtype)
    if not isinstance(source, LoadedModel):
        raise TypeError(
            f"expected a model name or a LoadedModel, got {type(source).__name__}: load one "
            "with privlm.models.load_public_model, or wrap a transformers model and its "
            "tokenizer as LoadedModel(model, tokenizer, name, source)"
        )
    if getattr(source.model, ROUTER_ATTRIBUTE, None) is not None:
        # engines wrapped its projections with their adapter stacks (and a lock): the
        # public weights are loaded again rather than copied with the wrappers
        return replace(
            load_public_model(source.reference, device, dtype), loaded_as=source.reference
        )
    place = resolve_placement(device, dtype)
    _check_model_fits(source.model.config, place, f"{source.reference} (a working copy)")
    model: Any = copy.deepcopy(source.model)
    model = model.to(device=place.device, dtype=place.dtype).eval()
    return replace(source, model=model, loaded_as=source.reference)


def base_model_id(name_or_path: str) -> str:
    """The Hugging Face id of a model privlm ships by name (its name, for ``tiny``, which
    only privlm builds), the absolute path of a local directory, or the id given."""
    spec = KNOWN_MODELS.get(name_or_path)
    if spec is not None:
        return spec.hf_id or spec.name
    path = Path(name_or_path).expanduser()
    return str(path.resolve()) if path.exists() else name_or_path


def _load(name_or_path: str, place: Placement, seed: int) -> LoadedModel:
    spec = KNOWN_MODELS.get(name_or_path)
    if spec is not None and spec.kind == "tiny":
        tok = load_tokenizer("tiny")
        model: Any = build_tiny_model(tok, seed=seed)
        model = model.to(device=place.device, dtype=place.dtype)
        return LoadedModel(model, tok, "tiny", "tiny")
    if spec is not None:
        folder = prepare_gguf_model(spec)
        loaded = _from_directory(folder, place)
        return LoadedModel(loaded.model, loaded.tokenizer, spec.name, f"{spec.package} (GGUF)")
    path = Path(name_or_path).expanduser()
    if path.exists():
        return _from_directory(path, place)
    if name_or_path.startswith((".", "/", "~")):
        raise ModelLoadError(f"{name_or_path}: no such directory")
    return _from_hub(name_or_path, place)


def prepare_model(name_or_path: str = DEFAULT_MODEL, force: bool = False) -> str:
    """Pre-convert a model so later loads are fast; returns where it is cached."""
    spec = KNOWN_MODELS.get(name_or_path)
    if spec is not None and spec.kind == "gguf-package":
        return str(prepare_gguf_model(spec, force=force))
    if spec is not None:
        load_tokenizer(name_or_path)
        return "built in memory from a seed (tokenizer cached)"
    return load_public_model(name_or_path, **CPU_FLOAT32).source
