"""privlm's int8 linear layers (the tagger's blocks where the CPU has no bfloat16): the same
bits as torchao's per-token dynamic int8, the same products as the closed form in float64,
and one quantisation per shared input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from privlm.detect.int8 import (
    Int8Linear,
    Int8Mode,
    SharedInput,
    int8_mode,
    quantise_linears,
    symmetric_rows,
)

pytestmark = pytest.mark.fast

MODES = [Int8Mode(unsigned=u, reduce_range=r) for u in (False, True) for r in (False, True)]


def _inputs(seed: int, shape: tuple[int, ...] = (3, 7, 64)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    x[0, 0, 5] = 40.0  # an outlier: its row's scale, no other row's
    x[1, 2] = 0.0  # a row of zeros: scale clamped at eps, quantised to 0
    x[2, 3] = -x[2, 3].abs()  # rows of one sign: the scale from the far end either way
    x[2, 4] = x[2, 4].abs()
    return x


def _linear(seed: int, bias: bool, out_features: int = 48) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(64, out_features, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
def test_the_same_bits_as_torchao_in_either_form(bias, reduce_range):
    """torchao's ``Int8DynamicActivationInt8WeightConfig`` (its form chosen for this CPU)
    and ours in both forms (int8 × int8, and uint8 shifted by 128 with the shift taken off
    through the weights' column sums) give identical outputs: the integer sums are exact
    either way, and the rescale runs in the same order."""
    ao = pytest.importorskip("torchao.quantization")
    linear = _linear(1, bias)
    reference = nn.Sequential(_linear(1, bias))
    config = ao.Int8DynamicActivationInt8WeightConfig(reduce_range=reduce_range)
    ao.quantize_(reference, config)
    x = _inputs(2)
    with torch.no_grad():
        expected = reference(x)
        for unsigned in (False, True):
            ours = Int8Linear(linear, SharedInput(Int8Mode(unsigned, reduce_range)))
            assert torch.equal(ours(x), expected), unsigned


@pytest.mark.parametrize("mode", MODES)
def test_the_products_are_the_closed_form_of_the_quantised_values(mode):
    """Against float64 arithmetic on the integers and scales: y = (q_x s_x)(q_w s_w)ᵀ + b;
    every integer is within the mode's bounds and every value within half a step of its
    original."""
    linear = _linear(3, bias=True)
    x = _inputs(4).reshape(-1, 64)
    lo, hi = mode.bounds
    qx, sx = symmetric_rows(x, mode.bounds)
    qw, sw = symmetric_rows(linear.weight.detach(), mode.bounds)
    for q, s, v in ((qx, sx, x), (qw, sw, linear.weight.detach())):
        assert q.min() >= lo and q.max() <= hi and torch.equal(q, q.round())
        assert ((q * s - v).abs() <= s / 2 + 1e-6).all()
    exact = (qx.double() * sx.double()) @ (qw.double() * sw.double()).T + linear.bias.double()
    with torch.no_grad():
        got = Int8Linear(linear, SharedInput(mode))(x)
    assert torch.allclose(got.double(), exact, rtol=1e-5, atol=1e-5)


def test_a_row_s_output_does_not_depend_on_the_other_rows():
    """One scale per token: a text's features are the same alone and in any batch."""
    linear = _linear(5, bias=False)
    layer = Int8Linear(linear, SharedInput(Int8Mode(True, False)))
    x = _inputs(6)
    with torch.no_grad():
        together = layer(x)
        for i in range(x.shape[0]):
            assert torch.equal(layer(x[i : i + 1]), together[i : i + 1])


class _Counting(SharedInput):
    def __init__(self, mode: Int8Mode) -> None:
        super().__init__(mode)
        self.quantisations = 0

    def quantised(self, x):
        self.quantisations += not self.holds(x)
        return super().quantised(x)


def test_layers_reading_one_tensor_quantise_it_once_and_a_changed_tensor_afresh():
    shared = _Counting(Int8Mode(True, False))
    q, k = Int8Linear(_linear(7, False), shared), Int8Linear(_linear(8, False), shared)
    x = _inputs(9)
    with torch.no_grad():
        alone = Int8Linear(_linear(8, False), SharedInput(shared.mode))(x)
        q(x)
        assert torch.equal(k(x), alone) and shared.quantisations == 1
        x.mul_(2.0)  # in place: a new version, quantised again
        assert torch.equal(k(x), Int8Linear(_linear(8, False), SharedInput(shared.mode))(x))
        assert shared.quantisations == 2
        k(x.clone())  # equal values, another tensor
        assert shared.quantisations == 3


def test_quantise_linears_replaces_every_linear_and_lets_go_of_its_input():
    torch.manual_seed(10)
    model = nn.Sequential(nn.Linear(64, 96), nn.SiLU(), nn.Sequential(nn.Linear(96, 64)))
    x = _inputs(11)
    with torch.no_grad():
        exact = model(x)
        shared = quantise_linears(model, Int8Mode(True, False))
        got = model(x)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8Linear) for m in model.modules()) == 2
    assert shared._held is None  # cleared after the pass: nothing held alive
    assert (got - exact).norm() / exact.norm() < 0.05


def test_the_form_follows_the_cpu(monkeypatch):
    """u8s8 where the CPU has no AMX (VNNI's form, and AVX2's faster one), int8 × int8 with
    AMX; halved ranges without VNNI."""
    for vnni, amx, unsigned in ((True, False, True), (True, True, False), (False, False, True)):
        monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda v=vnni: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda a=amx: a)
        assert int8_mode(without_vnni=not vnni) == Int8Mode(unsigned, not vnni)


class _Switching(torch.Tensor):
    """A tensor whose version, when read, first lets "another thread" run: the worst
    moment for a thread switch, between the held input's check and its use."""

    switch = None

    @property
    def _version(self):
        hook, type(self).switch = type(self).switch, None
        if hook is not None:
            hook()
        return torch.Tensor._version.__get__(self)


def test_another_thread_quantising_mid_check_never_hands_over_its_input():
    """A detector shared by a service's worker threads runs one body from several threads:
    a call must use the quantised form of its own input even when another thread stores
    its own between the check and the read (a version read once, per call, as one tuple;
    an implementation that reads the held input twice fails here)."""
    shared = SharedInput(Int8Mode(True, False))
    q, k = Int8Linear(_linear(12, False), shared), Int8Linear(_linear(13, False), shared)
    mine = _inputs(20).as_subclass(_Switching)
    other = _inputs(21)
    with torch.no_grad():
        expected = k(mine.as_subclass(torch.Tensor).clone())
        q(mine)
        _Switching.switch = lambda: shared.quantised(other)
        got = k(mine)  # the held input matches; the other thread stores its own mid-check
    assert _Switching.switch is None  # the switch happened
    assert torch.equal(got.as_subclass(torch.Tensor), expected)
