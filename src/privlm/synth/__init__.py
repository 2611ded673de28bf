"""DP synthetic text: ``privlm synth`` (:func:`synthesize`), a dataset whose every text is
generated from a disjoint batch of private units with PMixED's per-token mixture of
in-context members, charged per unit (docs/sharp_edges.md, "DP synthetic text").

- ``synthesize(model, data, out, SynthConfig(...), labels=, ledger=, resume=)`` ->
  ``SynthResult`` (the texts in ``out``, the statement beside it)
"""

from privlm.lazy import lazy_exports

EXPORTS = {"SynthConfig": "config", "SynthResult": "run", "synthesize": "run"}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
