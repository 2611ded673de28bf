"""In-context members: each row's log-probabilities are those of its member prompt followed
by the context, alone, by every path the predictors and the service use."""

from __future__ import annotations

import pytest
import torch

from privlm.models import load_public_model
from privlm.predict.batching import DecodeBatch
from privlm.predict.engine import CachedDecoder, Prefill, upcast_log_softmax
from privlm.predict.in_context import InContextEngine

PROMPTS = [[5, 6, 7, 8, 9], [11], [], [3, 4, 3, 4, 3, 4, 3]]


@pytest.fixture(scope="module")
def lm():
    return load_public_model("tiny", device="cpu")


@pytest.fixture(scope="module")
def engine(lm):
    return InContextEngine(lm.model, PROMPTS, pad_id=0)


def alone(lm, prompt, context):
    """What the public model says after ``prompt + context``, with no engine."""
    ids = torch.tensor([prompt + context])
    return upcast_log_softmax(lm.model(input_ids=ids).logits[0, -1])


def reference(lm, rows, context):
    return torch.stack([alone(lm, [] if r < 0 else PROMPTS[r], context) for r in rows])


ROWS = [-1, 0, 1, 2, 3]


def test_one_pass_gives_each_member_its_prompt_then_the_context(lm, engine):
    got = engine.log_probs([2, 9, 4], ROWS)
    assert torch.allclose(got, reference(lm, ROWS, [2, 9, 4]), atol=1e-5)


def test_teacher_forced_logits_cover_the_callers_positions_only(lm, engine):
    ids = torch.tensor([[2, 9, 4, 7]] * len(ROWS))
    logits, _ = engine.logits(ids, torch.tensor(ROWS))
    assert logits.shape[1] == 4
    for t in range(1, 5):
        want = reference(lm, ROWS, [2, 9, 4, 7][:t])
        assert torch.allclose(upcast_log_softmax(logits[:, t - 1]), want, atol=1e-5)


def test_a_cached_decoder_in_chunks_matches(lm, engine):
    prefill = Prefill(engine, [2, 9, 4, 1, 1], ROWS).run(chunk=2)
    assert torch.allclose(prefill.last, reference(lm, ROWS, [2, 9, 4, 1, 1]), atol=1e-5)
    dec = CachedDecoder(engine, [2, 9, 4], ROWS)
    dec.keep([0, 2, 4])
    got = dec.advance(6)
    assert torch.allclose(got, reference(lm, [-1, 1, 3], [2, 9, 4, 6]), atol=1e-5)


def test_the_services_batch_of_two_generations_matches(lm, engine):
    class Seq:
        def __init__(self, rows):
            self.rows = rows

    batch = DecodeBatch(engine)
    a, b = Seq([-1, 0, 3]), Seq([1, 2])
    slot_a = batch.join(a, Prefill(engine, [2, 9, 4, 1], a.rows).run())
    slot_b = batch.join(b, Prefill(engine, [8], b.rows).run())
    slot_a.pending, slot_b.pending = 5, 6
    batch.step()
    assert torch.allclose(slot_a.last, reference(lm, a.rows, [2, 9, 4, 1, 5]), atol=1e-5)
    assert torch.allclose(slot_b.last, reference(lm, b.rows, [8, 6]), atol=1e-5)
    a.rows = [0]  # a row dropped, then another step
    slot_a.pending, slot_b.pending = 7, 7
    batch.step()
    assert torch.allclose(slot_a.last, reference(lm, [0], [2, 9, 4, 1, 5, 7]), atol=1e-5)
    assert torch.allclose(slot_b.last, reference(lm, b.rows, [8, 6, 7]), atol=1e-5)


# -- an in-context ensemble end to end: built, neighbouring, served ------------------------

KEY = "ab" * 16


def users(replace_user: int | None = None):
    from privlm.data import Dataset
    from privlm.data.records import Record

    recs = [
        Record(
            f"note {u}-{i}: patient {1000 + u} {'was moved' if u == replace_user else 'seen'}"
            f" about condition {i}.",
            f"user-{u}",
            line=u * 3 + i,
        )
        for u in range(8)
        for i in range(3)
    ]
    return Dataset(recs, "test", unit_kind="user")


def build(tmp_path, name, data, parts=4, protocol="pmixed"):
    from privlm.training.config import EnsembleConfig
    from privlm.training.ensemble import train_ensemble

    cfg = EnsembleConfig(parts=parts, protocol=protocol, members="in-context", prompt_tokens=256)
    train_ensemble("tiny", data, tmp_path / name, cfg, progress=False, partition_key=KEY)
    return tmp_path / name


def test_neighbouring_datasets_change_one_members_prompt_and_release_the_same_manifest(tmp_path):
    import json

    a, b = build(tmp_path, "a", users()), build(tmp_path, "b", users(replace_user=5))
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert {**ma, "created_at": ""} == {**mb, "created_at": ""}
    assert (a / "README.md").read_bytes() == (b / "README.md").read_bytes()
    pa = json.loads((a / "member-prompts.json").read_text())["prompts"]
    pb = json.loads((b / "member-prompts.json").read_text())["prompts"]
    assert len(pa) == len(pb) == 4 and sum(x != y for x, y in zip(pa, pb, strict=True)) == 1
    assert all(len(p) <= 256 for p in pa)
    manifest = ma
    assert manifest["member_kind"] == "in-context" and manifest["training"] == {}
    assert "note" not in (a / "manifest.json").read_text()


def test_one_query_on_neighbouring_in_context_ensembles_costs_at_most_its_charge(tmp_path):
    """The per-unit proof, on the members privlm really builds: one user replaced changes
    one member's prompt; the exact Rényi divergence of one query's release (every Poisson
    subset enumerated, the whole vocabulary, both directions, orders 2..α) is within the
    charged curve."""
    import itertools

    import numpy as np

    from privlm.accounting.analysis import pmixed as pm
    from privlm.predict.loading import load_ensemble
    from privlm.predict.pmixed_rule import pmixed_mixture

    alpha, q, n = 3, 0.5, 4
    radius = pm.solve_radius(0.05, alpha, n, q)
    curve = pm.query_rdp_curve(radius, alpha, n, q)

    def release(directory):
        engine = load_ensemble(directory, device="cpu").engine
        lp = engine.log_probs([10, 20, 30], [-1, *range(n)])
        total = torch.zeros(lp.shape[1], dtype=torch.float64)
        for subset in itertools.product([0, 1], repeat=n):
            members = torch.tensor(subset, dtype=torch.bool)
            weight = q ** sum(subset) * (1 - q) ** (n - sum(subset))
            mix = pmixed_mixture(lp[1:], lp[0], alpha, radius, members)
            total += weight * mix.log_probs.exp()
        return total.numpy()

    before = release(build(tmp_path, "a", users()))
    after = release(build(tmp_path, "b", users(replace_user=5)))
    assert not np.allclose(before, after)  # the replaced member's prompt matters
    for k in range(2, alpha + 1):
        for p, r in ((before, after), (after, before)):
            d = float(np.log(np.sum(p**k * r ** (1.0 - k))) / (k - 1))
            assert d <= curve[float(k)] * (1 + 1e-9), (k, d, curve[float(k)])


def test_an_in_context_ensemble_serves_pmixed_and_submix_with_their_ledgers(tmp_path):
    from privlm.accounting import PrivacyLedger
    from privlm.predict.config import PMixEDConfig, SubMixConfig
    from privlm.predict.factory import build_predictor
    from privlm.predict.loading import load_ensemble

    loaded = load_ensemble(build(tmp_path, "pm", users()), device="cpu")
    cfg = PMixEDConfig(queries=16, sample_rate=0.5)
    pmx = build_predictor(cfg, loaded, ledger=tmp_path / "l.db", name="pm", seed=1)
    gen = pmx.generate("note", max_new_tokens=4)
    assert len(gen.token_ids) == PrivacyLedger(tmp_path / "l.db", "pm").count() == 4
    sm_loaded = load_ensemble(
        build(tmp_path, "sm", users(), parts=2, protocol="submix"), device="cpu"
    )
    assert sm_loaded.engine.n_adapters == 4
    sm = build_predictor(
        SubMixConfig(epsilon=2.0, alpha=2.0, beta=0.05), sm_loaded, ledger=tmp_path / "s.db",
        name="sm", seed=1,
    )  # fmt: skip
    assert sm.generate("note", max_new_tokens=3).token_ids


def test_the_prompts_are_encoded_once_whichever_rows_come_first(lm):
    calls = []
    hook = lm.model.register_forward_pre_hook(
        lambda _m, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        fresh = InContextEngine(lm.model, PROMPTS, pad_id=0)
        first = fresh.log_probs([2, 9, 4], [3])  # one member first
        every = fresh.log_probs([2, 9, 4], ROWS)
    finally:
        hook.remove()
    width = max(len(p) for p in PROMPTS)
    assert calls == [(len(PROMPTS) + 1, width), (1, 3), (len(ROWS), 3)]
    assert torch.allclose(first, reference(lm, [3], [2, 9, 4]), atol=1e-5)
    assert torch.allclose(every, reference(lm, ROWS, [2, 9, 4]), atol=1e-5)


def test_scoring_many_rows_runs_them_in_chunks_with_the_same_logits(lm, engine, monkeypatch):
    from privlm.predict import in_context

    ids = torch.tensor([[2, 9, 4, 7]] * len(ROWS))
    whole, _ = engine.logits(ids, torch.tensor(ROWS))
    monkeypatch.setattr(in_context, "SCORE_ROWS", 2)
    chunked, cache = engine.logits(ids, torch.tensor(ROWS))
    assert cache is None and chunked.shape == whole.shape
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=0)


def test_a_loaded_in_context_ensemble_pads_to_the_declared_width_not_the_longest_prompt(
    tmp_path,
):
    """The hidden block's width is the manifest's prompt_tokens on neighbouring datasets
    whose longest prompts differ, and the public row's logits are the same bits on both
    sides: the width (and so every row's rounding, and the work) is a setting, not a
    function of the private records."""
    import torch

    from privlm.data import Dataset
    from privlm.data.records import Record
    from privlm.predict.loading import load_ensemble

    base = users()
    longer = Dataset(
        [*base.records, Record("a much longer note " * 12, "user-0", line=99)], "t", "user"
    )
    loaded = [
        load_ensemble(build(tmp_path, n, d), device="cpu") for n, d in (("a", base), ("b", longer))
    ]
    widths = {e.engine.prefix_width for e in loaded}
    assert widths == {256}
    ids = torch.tensor([[1, 2, 3, 4]])
    public = [e.engine.logits(ids, torch.tensor([-1]))[0] for e in loaded]
    assert torch.equal(public[0], public[1])
