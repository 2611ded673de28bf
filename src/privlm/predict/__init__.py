"""Private prediction: PMixED and SubMix over a batched LoRA ensemble, and the one
:class:`Predictor` interface every way of answering a prompt shares. The functions the CLI
calls:

- ``load_ensemble(path, device=, dtype=)`` -> ``LoadedEnsemble(model, engine, manifest)``;
  ``load_adapter(path, model)`` for one DP adapter
- ``build_predictor(config, loaded, ledger=, name=, seed=)`` -> the predictor a typed config
  describes: ``PMixEDConfig``, ``ScreenedPMixEDConfig`` or ``SubMixConfig`` (charged to
  durable ledgers), or
  ``PlainConfig`` (the public model, one adapter, the plain ensemble average);
  ``mechanism_config(name, ε=, δ=, …)`` builds a mixture's config from loose numbers
- ``predictor.stream(ids, n)``, ``.generate(prompt, n)``, ``.score(ids)``, ``.budget()``
- ``evaluate(predictor, blocks)`` -> held-out perplexity
"""

from privlm.lazy import lazy_exports

EXPORTS = {
    "CachedDecoder": "engine",
    "EnsembleEngine": "engine",
    "PMixED": "pmixed",
    "PMixEDConfig": "pmixed",
    "ScreenedPMixED": "screened",
    "ScreenedPMixEDConfig": "config",
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
    "register_builder": "factory",
    "PlainConfig": "config",
    "PredictorConfig": "config",
    "mechanism_config": "config",
    "load_ensemble": "loading",
    "load_adapter": "loading",
    "LoadedEnsemble": "loading",
    "evaluate": "evaluate",
    "PerplexityReport": "evaluate",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
