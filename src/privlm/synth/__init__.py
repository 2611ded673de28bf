"""DP synthetic text: ``privlm synth`` (:func:`synthesize`), a dataset whose every text is
generated from a disjoint batch of private units with PMixED's per-token mixture of
in-context members, charged per unit (docs/sharp_edges.md, "DP synthetic text").

- ``synthesize(model, data, out, SynthConfig(...), labels=, ledger=, resume=)`` ->
  ``SynthResult`` (the texts in ``out``, the statement beside it)
- ``synthesize_baseline(model, out, SynthConfig(...), labels=)``: the no-reference row, the
  same contexts and settings with every member the public model (no record read)
- ``overlap_report(texts, records, detector, canaries)``: the curator's report of how close
  the texts come to the records (not DP: never part of the release)
"""

from privlm.lazy import lazy_exports

EXPORTS = {
    "SynthConfig": "config",
    "SynthResult": "run",
    "overlap_report": "report",
    "synthesize": "run",
    "synthesize_baseline": "run",
}
__getattr__ = lazy_exports(__name__, EXPORTS)
__all__ = sorted(EXPORTS)
