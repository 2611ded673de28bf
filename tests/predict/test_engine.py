"""The batched engine equals PEFT adapter by adapter, in one pass, with and without cache."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from peft import PeftModel

from privlm.errors import ModelLoadError
from privlm.models import load_public_model
from privlm.predict.engine import AdapterBlock, CachedDecoder, EnsembleEngine, adapter_block


def peft_log_probs(path, context):
    model = PeftModel.from_pretrained(load_public_model("tiny").model, path).eval()
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([context])).logits[0, -1], -1)


def test_each_row_equals_its_peft_adapter_in_one_pass(engine, adapter_dirs):
    eng, _ = engine
    ctx = [5, 17, 300, 42, 7]
    calls = []
    handle = eng.model.register_forward_hook(lambda *a: calls.append(1))
    lp = eng.log_probs(ctx, [-1, 0, 1, 2, 3, 2])
    handle.remove()
    assert len(calls) == 1  # one forward pass for public + every adapter
    base = load_public_model("tiny").model
    with torch.no_grad():
        ref0 = torch.log_softmax(base(torch.tensor([ctx])).logits[0, -1].double(), -1)
    assert lp.dtype == torch.float64  # upcast before the softmax
    assert torch.allclose(lp[0], ref0, atol=1e-5)
    for i, path in enumerate(adapter_dirs):
        assert torch.allclose(lp[i + 1], peft_log_probs(path, ctx).double(), atol=1e-5)
    assert torch.equal(lp[3], lp[5])
    assert not torch.allclose(lp[1], lp[2])


def test_kv_cached_decoding_matches_recomputation(engine):
    eng, _ = engine
    rows = [-1, 0, 1, 2, 3]
    dec = CachedDecoder(eng, [1, 2, 3], rows)
    ctx = [1, 2, 3]
    for tok in (9, 99, 999):
        got = dec.advance(tok)
        ctx.append(tok)
        assert torch.allclose(got, eng.log_probs(ctx, rows), atol=1e-5)


def test_bad_rows_and_adapters_refused(engine, tmp_path):
    eng, _ = engine
    with pytest.raises(ValueError, match="adapter indices"):
        eng.log_probs([1, 2], [4])
    with pytest.raises(ModelLoadError, match="not a PEFT adapter"):
        EnsembleEngine.from_directories(load_public_model("tiny").model, [tmp_path])


def test_engines_sharing_one_base_model_each_compute_their_own_adapters(adapter_dirs):
    """Deployments of one public model share its weights. Two engines attach
    their stacks to one base; each must give exactly what an engine on its own copy gives,
    the public row must stay the public model, and there is one copy of the weights."""
    from privlm.models.pool import ModelPool

    pool = ModelPool()
    shared = pool.get("tiny", device="cpu")
    first = EnsembleEngine.from_directories(shared.model, adapter_dirs[:2])
    second = EnsembleEngine.from_directories(pool.get("tiny", device="cpu").model, adapter_dirs[2:])
    assert len(pool) == 1 and first.model is second.model
    context = shared.tokenizer("the patient was", add_special_tokens=False)["input_ids"]
    alone = [
        EnsembleEngine.from_directories(load_public_model("tiny").model, dirs)
        for dirs in (adapter_dirs[:2], adapter_dirs[2:])
    ]
    for eng, ref in zip((first, second, first), (*alone, alone[0]), strict=True):
        assert torch.allclose(
            eng.log_probs(context, [-1, 0, 1]), ref.log_probs(context, [-1, 0, 1])
        )
    public = load_public_model("tiny").model(torch.tensor([context])).logits[0, -1]
    assert torch.allclose(first.log_probs(context, [-1])[0], torch.log_softmax(public.double(), -1))


def test_engines_on_one_base_may_be_called_from_threads(adapter_dirs):
    """The routing is shared state of the base model; its lock keeps concurrent engines
    (two deployments answering at once) from seeing each other's adapters."""
    from concurrent.futures import ThreadPoolExecutor

    lm = load_public_model("tiny")
    engines = [
        EnsembleEngine.from_directories(lm.model, d) for d in (adapter_dirs[:2], adapter_dirs[2:])
    ]
    context = lm.tokenizer("a b c", add_special_tokens=False)["input_ids"]
    expected = [e.log_probs(context, [0, 1]) for e in engines]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: engines[i % 2].log_probs(context, [0, 1]), range(24)))
    for i, g in enumerate(got):
        assert torch.equal(g, expected[i % 2])


@pytest.mark.parametrize(
    ("rows", "block"),
    [
        ([-1, 0, 1, 2, 3], AdapterBlock(1, 0, 4)),
        ([1, 2, -1], AdapterBlock(0, 1, 2)),
        ([-1, -1, 2], AdapterBlock(2, 2, 1)),
        ([-1, 0, 1, 2, 3, 2], None),  # a repeated adapter
        ([0, -1, 1], None),  # not contiguous
        ([1, 0], None),  # out of order
        ([-1, -1], None),  # no adapter at all
    ],
)
def test_adapter_block_is_read_only_from_the_layouts_it_covers(rows, block):
    assert adapter_block(torch.tensor(rows)) == block


@pytest.mark.parametrize("rows", [[-1, 0, 1, 2, 3], [-1, 1, 2], [2, 3, -1, -1]])
def test_block_layout_gives_exactly_what_the_gathering_path_gives(engine, rows):
    """Rows laid out as one block read slices of the stacks; any other layout gathers.
    The arithmetic is the same, so the log-probs must be bitwise equal."""
    eng, _ = engine
    ctx = [5, 17, 300, 42, 7]
    fast = eng.log_probs(ctx, rows)
    with patch("privlm.predict.engine.adapter_block", return_value=None):
        slow = eng.log_probs(ctx, rows)
    assert adapter_block(torch.tensor(rows)) is not None
    assert torch.equal(fast, slow)
    dec_fast = CachedDecoder(eng, [1, 2, 3], rows)
    with patch("privlm.predict.engine.adapter_block", return_value=None):
        dec_slow = CachedDecoder(eng, [1, 2, 3], rows)
        slow_next = dec_slow.advance(9)
    assert torch.equal(dec_fast.advance(9), slow_next)
