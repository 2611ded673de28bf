"""A detector that deliberately misses given strings (JFT §6.4: "we purposely code it to
mark the canary as public"), for auditing what a missed secret costs."""

from __future__ import annotations

from collections.abc import Sequence

from privlm.detect.base import Detector, Span


class AllowingDetector:
    """``inner``'s spans, minus any span overlapping an occurrence of a ``public`` string."""

    def __init__(self, inner: Detector, public: Sequence[str]) -> None:
        self.inner = inner
        self.public = [p for p in public if p]
        self.name = f"{inner.name} (missing {len(self.public)} string(s))"

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        out = []
        for text, spans in zip(texts, self.inner.detect(texts), strict=True):
            holes = []
            for p in self.public:
                i = text.find(p)
                while i >= 0:
                    holes.append((i, i + len(p)))
                    i = text.find(p, i + 1)
            out.append([s for s in spans if not any(s.start < e and b < s.end for b, e in holes)])
        return out
