"""Private prediction: PMixED and SubMix over a batched LoRA ensemble."""

from privlm.predict.engine import CachedDecoder, EnsembleEngine
from privlm.predict.pmixed import Generation, PMixED, PMixEDConfig
from privlm.predict.submix import SubMix, SubMixConfig, part_ledgers

__all__ = [
    "CachedDecoder",
    "EnsembleEngine",
    "Generation",
    "PMixED",
    "PMixEDConfig",
    "SubMix",
    "SubMixConfig",
    "part_ledgers",
]
