"""Public models: SmolLM2-135M from its GGUF package, any HF model, and ``tiny`` for tests."""

from privlm.models.loading import (
    LoadedModel,
    ModelSource,
    load_public_model,
    load_tokenizer,
    prepare_model,
    reference_of,
    working_copy,
)
from privlm.models.perplexity import PerplexityResult, perplexity
from privlm.models.registry import DEFAULT_MODEL, KNOWN_MODELS, ModelSpec
from privlm.models.tiny import build_tiny_model

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "LoadedModel",
    "ModelSource",
    "ModelSpec",
    "PerplexityResult",
    "build_tiny_model",
    "load_public_model",
    "load_tokenizer",
    "perplexity",
    "prepare_model",
    "reference_of",
    "working_copy",
]
