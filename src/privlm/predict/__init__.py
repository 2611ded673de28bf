"""Private prediction: PMixED and SubMix over a batched LoRA ensemble, and the one
:class:`Predictor` interface every way of answering a prompt shares. The functions the CLI
calls:

- ``load_ensemble(path, device=, dtype=)`` -> ``LoadedEnsemble(model, engine, manifest)``;
  ``load_adapter(path, model)`` for one DP adapter
- ``build_predictor(config, loaded, budget=, name=, seed=)`` -> the predictor a typed config
  describes: ``PMixEDConfig``, ``ScreenedPMixEDConfig`` or ``SubMixConfig`` (charged to
  durable ledgers; with ``budget``, the dataset's ledger, its lifetime reserved there
  first), or ``PlainConfig`` (the public model, one adapter, the plain ensemble average)
- ``mechanism(name).make_config({...})``: a registered mechanism's config from loose
  settings; ``register_mechanism(Mechanism(...))`` adds one (:mod:`.mechanisms`)
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
    "register_mechanism": "mechanisms",
    "mechanism": "mechanisms",
    "mechanisms": "mechanisms",
    "Mechanism": "mechanisms",
    "PlainConfig": "config",
    "PredictorConfig": "config",
    "load_ensemble": "loading",
    "load_adapter": "loading",
    "LoadedEnsemble": "loading",
    "evaluate": "evaluate",
    "PerplexityReport": "evaluate",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
