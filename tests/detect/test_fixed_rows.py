"""Products in calls of one fixed shape (privlm.detect.fixed_rows): a text's rows get the
same bits alone and among other texts' rows, wherever they sit, for every product and
precision the tagger runs (its linear layers' shapes, float32, bfloat16 and both int8
forms). The kernels behind one call of many rows choose their blocking by the number of
rows (docs/sharp_edges.md, "The detector is a function of the record alone"); this checks,
on the machine it runs on, what the fixed shape rests on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from privlm.detect.fixed_rows import (
    ROWS,
    FixedRowsLinear,
    fixed_row_linears,
    in_fixed_rows,
    sharing_weights,
)
from privlm.detect.int8 import Int8Linear, Int8Mode, SharedInput

pytestmark = pytest.mark.fast

# SmolLM2-135M's blocks: q/o 576 → 576, k/v 576 → 192, gate/up 576 → 1536, down 1536 → 576
SHAPES = [(576, 576), (576, 192), (576, 1536), (1536, 576)]


def _layer(kind: str, k: int, n: int) -> nn.Module:
    torch.manual_seed(k + n)
    linear = nn.Linear(k, n, bias=False)
    if kind == "bfloat16":
        return FixedRowsLinear(linear.to(torch.bfloat16))
    if kind == "float32":
        return FixedRowsLinear(linear)
    layer = Int8Linear(linear, SharedInput(Int8Mode(unsigned=kind == "u8s8", reduce_range=False)))
    layer.rows = ROWS
    return layer


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "s8s8", "u8s8"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_texts_rows_get_the_bits_they_get_alone_wherever_they_sit(kind, shape):
    k, n = shape
    layer = _layer(kind, k, n)
    dtype = torch.bfloat16 if kind == "bfloat16" else torch.float32
    g = torch.Generator().manual_seed(7)
    others = torch.randn(3 * ROWS + 45, k, generator=g).to(dtype)
    with torch.no_grad():
        for length in (1, 7, 23, ROWS, ROWS + 9):
            text = torch.randn(length, k, generator=g).to(dtype)
            alone = layer(text)
            # first, straddling a call's boundary, last; batches of 1 to 4 calls
            for at in (0, ROWS - 3, others.shape[0]):
                batch = torch.cat([others[:at], text, others[at:]])
                assert torch.equal(layer(batch)[at : at + length], alone), (length, at)
            for extra in (1, ROWS // 2, 2 * ROWS):
                assert torch.equal(layer(torch.cat([text, others[:extra]]))[:length], alone)


def test_in_fixed_rows_runs_every_call_at_one_shape_and_cuts_the_padding():
    seen: list[tuple[int, ...]] = []

    def product(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return x * 2

    for m in (1, 5, 8, 9, 24):
        seen.clear()
        x = torch.arange(float(m * 3)).reshape(m, 3)
        assert torch.equal(in_fixed_rows(product, x, rows=8), x * 2)
        assert set(seen) == {(8, 3)} and len(seen) == -(-m // 8)


def test_fixed_row_linears_change_a_copy_that_shares_the_weights():
    """The copy's layers are wrapped; the original module keeps its own layers and no
    weight is duplicated; the outputs are the plain layer's to rounding."""
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    copy = sharing_weights(model)
    assert fixed_row_linears(copy, rows=4) == 2
    assert type(model[0]) is nn.Linear and type(model[2][0]) is nn.Linear
    assert isinstance(copy[0], FixedRowsLinear) and isinstance(copy[2][0], FixedRowsLinear)
    assert copy[0].linear.weight is model[0].weight
    assert fixed_row_linears(copy, rows=4) == 0  # never wrapped twice
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert torch.allclose(copy(x), model(x), atol=1e-6)
        assert copy(x).shape == (2, 5, 4)
