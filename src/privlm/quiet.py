"""Third-party log lines a privlm user cannot act on, dropped where they arise.

torchao (privlm does not need it: the tagger's int8 layers are privlm's own,
:mod:`privlm.detect.int8`; its tests compare them with torchao's) is imported by
transformers whenever it is installed, so on such a machine every model load would print
a "Failed to load ..._C*.so" line for each of torchao's CUDA kernels on a machine without
CUDA (its CPU path does not use them), and torch's notice that torchao registers Enum
classes the deprecated way, and torchao's "Detected no triton" (privlm calls none of
torchao's kernels). Only those three messages are dropped, by text; the loggers keep
every other record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable


class DropMessages(logging.Filter):
    """Drops the records whose message holds any of ``fragments``, when ``applies()``
    (asked only of a record that matches)."""

    def __init__(self, *fragments: str, applies: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self.fragments = fragments
        self.applies = applies

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not any(f in message for f in self.fragments):
            return True
        return self.applies is not None and not self.applies()


def _without_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


def quiet_third_party_logs() -> None:
    """Install the filters (idempotent: a logger keeps one of each)."""
    wanted = {
        "torchao": DropMessages("Failed to load", applies=_without_cuda),
        "torchao.kernel.intmm": DropMessages("Detected no triton"),
        "torch.utils._pytree": DropMessages("is an Enum subclass and is now natively supported"),
    }
    for name, drop in wanted.items():
        log = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in log.filters):
            log.addFilter(drop)
