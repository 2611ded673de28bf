"""Public models: SmolLM2-135M from its GGUF package, any HF model, and ``tiny`` for tests.

Exports resolve on first use, so ``from privlm.models import DEFAULT_MODEL`` (what a CLI
option's default needs) loads no torch. The ``perplexity`` function is imported from ``privlm.models.perplexity``
(its submodule has the same name)."""

from privlm.lazy import lazy_exports

EXPORTS = {
    "LoadedModel": "loading",
    "ModelSource": "loading",
    "load_public_model": "loading",
    "load_tokenizer": "loading",
    "prepare_model": "loading",
    "reference_of": "loading",
    "working_copy": "loading",
    "PerplexityResult": "perplexity",
    "DEFAULT_MODEL": "registry",
    "KNOWN_MODELS": "registry",
    "ModelSpec": "registry",
    "build_tiny_model": "tiny",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
