"""Private prediction: PMixED and SubMix over a batched LoRA ensemble, and the one
:class:`Predictor` interface every way of answering a prompt shares. The functions the CLI
calls:

- ``load_ensemble(path, device=, dtype=)`` -> (public model, engine, manifest)
- ``build_predictor(method, path, loaded, ledger, name, ε, δ, α, T, q, β, seed)`` -> PMixED
  or SubMix with durable ledgers; ``plain_predictor(method, engine, tokenizer)`` -> the public
  model, one adapter or the plain ensemble average
- ``predictor.stream(ids, n)``, ``.generate(prompt, n)``, ``.score(ids)``, ``.budget()``
- ``evaluate(predictor, blocks)`` -> held-out perplexity
"""

from privlm.lazy import lazy_exports

EXPORTS = {
    "CachedDecoder": "engine",
    "EnsembleEngine": "engine",
    "PMixED": "pmixed",
    "PMixEDConfig": "pmixed",
    "SubMix": "submix",
    "SubMixConfig": "submix",
    "part_ledgers": "submix",
    "PlainPredictor": "plain",
    "Generation": "protocol",
    "Predictor": "protocol",
    "Scores": "protocol",
    "Token": "protocol",
    "TokenStream": "protocol",
    "build_predictor": "factory",
    "plain_predictor": "factory",
    "load_ensemble": "loading",
    "evaluate": "evaluate",
    "PerplexityReport": "evaluate",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
