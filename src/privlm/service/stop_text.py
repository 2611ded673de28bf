"""``stop`` strings over text that arrives in pieces (post-processing: it costs no privacy).

Text that could be the start of a stop string is held back until the next piece shows
whether it is; at a stop, the text before it is the answer and generation ends.
"""

from __future__ import annotations


class StopText:
    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.held = ""
        self.hit = False

    def feed(self, piece: str) -> str:
        """The part of ``held + piece`` that can be sent now."""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit, self.held = True, ""
            return text[: min(found)]
        keep = self._partial(text)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, once no more text will come."""
        text, self.held = self.held, ""
        return text

    def _partial(self, text: str) -> int:
        """The length of the longest end of ``text`` that begins some stop string."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best
