"""Several generations on one engine decoded together: one forward pass per step for all.

Each generation (a :class:`~privlm.predict.protocol.Sequence`) keeps its own rows (public
model, adapters) and its own part of the KV cache; the parts are stacked along the batch axis
of one cache, left-padded to a common length. The attention mask hides the padding and each
row gets its true position, so a row's log-probabilities are those it would get decoded alone
(up to float rounding; ``tests/predict/test_batching.py`` checks it). Only the forward passes
are shared: each generation's mechanism, sampling and charges stay its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin

from privlm.errors import PrivlmError
from privlm.predict.engine import EnsembleEngine, Prefill, upcast_log_softmax
from privlm.predict.protocol import Sequence, kept_positions


@dataclass(eq=False)
class Slot:
    """One generation's place in the batch: its rows, its true length, its last
    log-probabilities (rows, V) and the token it appends next."""

    seq: Sequence
    rows: list[int]
    length: int
    last: torch.Tensor
    pending: int | None = None


def _stack_right_aligned(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(Ba, H, La, D) and (Bb, H, Lb, D) → (Ba + Bb, H, max(La, Lb), D), each right-aligned
    with zeros in front: one copy of each, written into one new tensor."""
    width = max(a.shape[2], b.shape[2])
    out = a.new_zeros(a.shape[0] + b.shape[0], a.shape[1], width, a.shape[3])
    out[: a.shape[0], :, width - a.shape[2] :] = a
    out[a.shape[0] :, :, width - b.shape[2] :] = b
    return out


def _kv(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values), (B, H, L, D); only attention caches can be stacked."""
    out = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise PrivlmError(f"cannot batch a {type(layer).__name__} cache across requests")
        out.append((keys, values))
    return out


def _replace(cache: DynamicCache, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Put each layer's new (keys, values) into ``cache`` in place, as transformers'
    ``batch_select_indices`` does: building a new ``DynamicCache`` from tensors would copy
    them all once more (a long prompt's cache is hundreds of MB)."""
    for layer, (keys, values) in zip(cache.layers, layers, strict=True):
        if not isinstance(layer, CacheLayerMixin):
            raise PrivlmError(f"cannot batch a {type(layer).__name__} cache across requests")
        layer.keys, layer.values = keys, values


class DecodeBatch:
    """The generations decoded together on one engine, and their stacked KV cache."""

    def __init__(self, engine: EnsembleEngine) -> None:
        self.engine = engine
        self.slots: list[Slot] = []
        self.cache: DynamicCache | None = None
        self.width = 0  # the cache's length, padding included

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def n_rows(self) -> int:
        return sum(len(s.rows) for s in self.slots)

    def join(self, seq: Sequence, prefill: Prefill) -> Slot:
        """``seq`` joins the batch with its finished prefill (its cache joins the stack)."""
        if prefill.last is None or prefill.engine is not self.engine:
            raise ValueError("only a finished prefill on this batch's engine can join it")
        ids = prefill.prompt
        slot = Slot(seq, prefill.rows.tolist(), len(ids), prefill.last)
        if self.cache is None:
            self.cache, self.width = prefill.cache, len(ids)  # adopted, not copied
        else:
            merged = [
                (_stack_right_aligned(keys, k), _stack_right_aligned(values, v))
                for (keys, values), (k, v) in zip(_kv(self.cache), _kv(prefill.cache), strict=True)
            ]  # fmt: skip
            _replace(self.cache, merged)
            self.width = max(self.width, len(ids))
        self.slots.append(slot)
        return slot

    def remove(self, slot: Slot) -> None:
        """Drop a finished (or cancelled) generation and its cache rows."""
        self._select({id(s): (s.rows if s is not slot else []) for s in self.slots})
        self.slots.remove(slot)

    def step(self) -> None:
        """One forward pass: every slot appends its pending token (its ``seq.rows`` may have
        shrunk since the last step) and gets its next log-probabilities in ``last``."""
        self._select({id(s): s.seq.rows for s in self.slots})
        if not self.slots:
            return
        if any(s.pending is None for s in self.slots):
            raise ValueError("every slot needs its next token before a step")
        assert self.cache is not None
        ids = torch.tensor([s.pending for s in self.slots for _ in s.rows])[:, None]
        rows = torch.tensor([r for s in self.slots for r in s.rows])
        positions = torch.tensor([s.length for s in self.slots for _ in s.rows])[:, None]
        mask = torch.ones(len(rows), self.width + 1, dtype=torch.long)
        start = 0
        for s in self.slots:
            mask[start : start + len(s.rows), : self.width - s.length] = 0
            start += len(s.rows)
        logits, _ = self.engine.logits(ids, rows, self.cache, mask, positions)
        last = upcast_log_softmax(logits[:, -1])
        self.width += 1
        start = 0
        for s in self.slots:
            s.last, s.length, s.pending = last[start : start + len(s.rows)], s.length + 1, None
            start += len(s.rows)

    def _select(self, keep: dict[int, list[int]]) -> None:
        """Keep, for each slot, the rows ``keep[id(slot)]`` (a subsequence of its rows), and
        drop the padding columns no remaining row needs."""
        index, start = [], 0
        changed = False
        for s in self.slots:
            rows = keep[id(s)]
            index += [start + p for p in kept_positions(s.rows, rows)]
            start += len(s.rows)
            if len(rows) < len(s.rows):
                changed = True
                if rows:
                    s.last = s.last[kept_positions(s.rows, rows)]
                s.rows = list(rows)
        if not changed or self.cache is None:
            return
        if not index:
            self.cache, self.width = None, 0
            return
        trim = self.width - max(s.length for s in self.slots if s.rows)
        idx = torch.tensor(index, device=self.engine.device)
        _replace(self.cache, [(k[idx, :, trim:], v[idx, :, trim:]) for k, v in _kv(self.cache)])
        self.width -= trim
