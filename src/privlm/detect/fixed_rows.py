"""Matrix products of one fixed shape, so each row's result is a function of that row alone.

A linear layer multiplies its input's rows (every token of every text of a batch) by its
weight in one call. The BLAS and oneDNN kernels behind that call choose their blocking, their
instruction set (AMX tiles, AVX-512 BF16, small-matrix paths) and their split across threads
from the number of rows, and a different choice sums a row's products in another order. So a
token's output, rounded, moves with how many *other* rows share the call: measured on an
Intel Xeon with AMX, a text's bfloat16 features alone and in a batch of texts of its own
length differed (and float32's, at 7-token texts in batches of 4 or more; at 256 rows or more
under two threads), where on the AMD CPUs measured before they did not.

The tagger is JFT's policy function, which must be a function of each record alone
(docs/sharp_edges.md, "The detector is a function of the record alone, to the bit"). So
every product here runs in calls of exactly ``ROWS`` rows, the last one zero-padded: the
kernel, its blocking and its thread split are the same for every call whatever the batch,
and a row's result does not depend on the other rows of its call or on its position there
(each row is its own dot products; ``tests/detect/test_fixed_rows.py`` checks both on the
machine it runs on, for every product and precision the tagger uses).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

ROWS = 128  # rows per call: chosen on development text (docs/results.md)


def in_fixed_rows(
    product: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, rows: int = ROWS
) -> torch.Tensor:
    """``product`` of the rows of ``x`` (rows × columns), run on blocks of exactly ``rows``
    rows (the last zero-padded), concatenated and cut back to ``x``'s rows."""
    m = x.shape[0]
    outs: list[torch.Tensor] = []
    for start in range(0, m - m % rows, rows):
        outs.append(product(x[start : start + rows]))
    left = m % rows
    if left:
        tail = x.new_zeros((rows, *x.shape[1:]))
        tail[:left] = x[m - left :]
        outs.append(product(tail)[:left])
    return outs[0] if len(outs) == 1 else torch.cat(outs)


class FixedRowsLinear(nn.Module):
    """``linear`` (sharing its weights) applied in calls of exactly ``rows`` rows."""

    def __init__(self, linear: nn.Linear, rows: int = ROWS) -> None:
        super().__init__()
        self.linear, self.rows = linear, rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weight, bias = self.linear.weight, self.linear.bias
        y = in_fixed_rows(lambda rows: nn.functional.linear(rows, weight, bias), flat, self.rows)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def extra_repr(self) -> str:
        return f"rows={self.rows}"


def sharing_weights(module: nn.Module) -> nn.Module:
    """A copy of ``module``'s structure whose parameters and buffers are the original's
    (nothing is duplicated): its layers can be replaced without touching the original."""
    memo: dict[int, object] = {id(p): p for p in module.parameters()}
    memo.update({id(b): b for b in module.buffers()})
    return copy.deepcopy(module, memo)


def fixed_row_linears(module: nn.Module, rows: int = ROWS) -> int:
    """Replace every ``nn.Linear`` inside ``module`` by a :class:`FixedRowsLinear` over it
    (in place: call it on a copy, :func:`sharing_weights`); how many were replaced."""
    replaced = 0
    for parent in list(module.modules()):
        if isinstance(parent, FixedRowsLinear):
            continue
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, FixedRowsLinear(child, rows))
                replaced += 1
    return replaced
