"""The learned tagger on the tiny model (its mechanics), and the ``pii`` detector
(with the tagger on SmolLM2-135M) against its targets on held-out template families and
value sources. Not in the fast loop: these load models."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

from privlm.detect import evaluate_pii, make_detector, pii_corpus
from privlm.detect.base import Span, bridge_spans
from privlm.detect.pii_corpus import STRUCTURED
from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
from privlm.detect.pii_families_heldout import FRESH_SOURCES, HELDOUT_FAMILIES
from privlm.detect.pii_quality import score_texts


def test_the_truncated_body_shares_the_models_weights():
    import torch

    from privlm.detect.tagger import truncated_body
    from privlm.errors import PrivlmError
    from privlm.models import load_public_model

    lm = load_public_model("tiny", device="cpu")
    cut = truncated_body(lm.model, 1)
    assert len(cut.layers) == 1 and len(lm.model.model.layers) == 2
    assert cut.layers[0] is lm.model.model.layers[0]
    assert lm.model.config.num_hidden_layers == 2
    with torch.no_grad():
        out = cut(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False).last_hidden_state
    assert out.shape == (1, 3, lm.model.config.hidden_size)
    with pytest.raises(PrivlmError):
        truncated_body(lm.model, 3)


@pytest.fixture(scope="module")
def tiny_tagger(tmp_path_factory):
    from privlm.detect.tagger import TaggerConfig, train_tagger
    from privlm.models import load_public_model

    corpus = family_corpus(64, {"t": ("Patient {person} lives in {city}.",)}, ("faker:en_US",), 1)
    cfg = TaggerConfig(model="tiny", layer=1, hidden=16, epochs=30, learning_rate=2e-2)
    tagger = train_tagger(load_public_model("tiny", device="cpu"), corpus, cfg, progress=False)
    folder = tagger.save(tmp_path_factory.mktemp("tagger"), {"test": True})
    return tagger, folder, corpus


def test_the_tagger_learns_its_training_templates(tiny_tagger):
    tagger, _, corpus = tiny_tagger
    q = score_texts("tagger", corpus, tagger.predict([a.text for a in corpus]), 1.0)
    assert q.recall_by_type["PERSON"].overlap > 0.8 and q.recall_by_type["GPE"].overlap > 0.8


def test_a_saved_tagger_loads_and_predicts_as_its_saved_weights_say(tiny_tagger):
    from privlm.detect.tagger import TaggerDetector, load_tagger

    _, folder, corpus = tiny_tagger
    texts = [a.text for a in corpus[:8]]
    again = load_tagger(folder)
    assert again.predict(texts) == load_tagger(folder).predict(texts)
    meta = json.loads((folder / "tagger.json").read_text())
    assert meta["trained_on"] == {"test": True} and meta["config"]["layer"] == 1
    detector = TaggerDetector(folder)
    assert detector.describe()["model"] == "tiny" and len(detector.detect(texts)) == 8


def test_batches_by_length_answer_each_text_as_it_runs_alone(tiny_tagger):
    """predict sorts texts by length into batches: each text's spans are those it gets
    alone, in the order given."""
    tagger, _, corpus = tiny_tagger
    texts = [a.text for a in corpus[:10]] + ["Ann", "Patient Ann Lee lives in a long street name."]
    texts = texts[::-1]
    assert tagger.predict(texts, batch=4) == [tagger.predict([t])[0] for t in texts]


def test_batches_hold_texts_of_one_token_count_at_most_size(tiny_tagger):
    """Every text once, in order of token count, each batch of one token count and at
    most ``size`` texts: nothing is padded."""
    from privlm.detect.tagger import by_token_count, same_length_batches

    tagger, _, corpus = tiny_tagger
    encoded = tagger.featurizer.encode([a.text for a in corpus[:40]] + ["x", "y", "Ann Lee"])
    batches = same_length_batches(encoded, 3)
    assert [j for b in batches for j in b] == by_token_count(encoded)
    for b in batches:
        assert 1 <= len(b) <= 3 and len({len(encoded[j].ids) for j in b}) == 1
    merged = [len(b) for b in batches]
    assert max(merged) == 3  # equal lengths do share a batch


def test_each_texts_features_on_the_real_model_are_those_it_gets_alone(monkeypatch):
    """Per record, to the bit: every batch predict runs gives each text the features and
    head logits it gets alone, so a text's spans never depend on the other texts (their
    lengths would, through the attention's rounding, with padded batches)."""
    import torch

    from privlm.detect.tagger import TaggerDetector, _pad

    tagger = TaggerDetector().tagger
    featurizer = tagger.featurizer
    # 32 texts make several batches of shared token counts (the property is per batch);
    # each is then run alone, the test's cost (about 5 s a text with int8 on AVX2 alone)
    texts = [a.text for a in family_corpus(32, DEV_FAMILIES, DEV_SOURCES, seed=5)]
    seen: list[tuple[list, list]] = []
    features = featurizer.features

    def recording(encoded):
        out = features(encoded)
        seen.append((list(encoded), out))
        return out

    monkeypatch.setattr(featurizer, "features", recording)
    tagger.predict(texts)
    monkeypatch.undo()
    assert sum(len(e) for e, _ in seen) == len(texts) and max(len(e) for e, _ in seen) > 1
    with torch.no_grad():
        for encoded, together in seen:
            logits = tagger.head(*_pad(together))
            for row, e in enumerate(encoded):
                alone = features([e])[0]
                assert torch.equal(alone, together[row])
                assert torch.equal(tagger.head(*_pad([alone]))[0], logits[row, : len(e.ids)])


def test_batches_are_cut_by_token_count_not_by_characters(tiny_tagger):
    """A batch pads to its longest text in tokens, so texts are ordered by token count (ties
    in the order given): a short string of many tokens goes after a long one of few."""
    from privlm.detect.tagger import by_token_count

    tagger, _, _ = tiny_tagger
    tok = tagger.featurizer.tokenizer
    texts = ["7 1 9 3 8 2 6 4", "information", "internationalization information", "0 5", "x"]
    counts = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = by_token_count(tagger.featurizer.encode(texts))
    assert sorted(order) == list(range(len(texts)))
    assert [counts[j] for j in order] == sorted(counts)
    assert order == sorted(range(len(texts)), key=lambda j: (counts[j], j))
    # the digits are the most tokens, and the longest string is not
    assert order[-1] == 0 and order != sorted(range(len(texts)), key=lambda j: len(texts[j]))


@pytest.mark.fast
def test_the_default_head_ships_in_the_package_from_the_recipe_it_names():
    """No training on first use: the default folder is the shipped head, of this recipe
    version, trained by the default recipe on the development families and sources only."""
    from dataclasses import asdict

    from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES
    from privlm.detect.provenance import DEFAULT_SENTENCES, TAGGER_VERSION
    from privlm.detect.tagger import SHIPPED, TaggerConfig, default_folder

    assert default_folder() == SHIPPED
    meta = json.loads((SHIPPED / "tagger.json").read_text())
    assert meta["version"] == TAGGER_VERSION and meta["config"] == asdict(TaggerConfig())
    assert meta["trained_on"] == {
        "families": sorted(DEV_FAMILIES), "sources": list(DEV_SOURCES),
        "sentences": DEFAULT_SENTENCES, "seed": TaggerConfig().seed,
    }  # fmt: skip
    assert (SHIPPED / "head.pt").stat().st_size < 2_000_000


def test_the_default_recipe_still_rebuilds_a_head_on_the_tiny_model(tmp_path):
    """``privlm detect train-tagger``'s recipe, on the tiny path: it trains, writes a head
    that loads, and the head predicts."""
    from privlm.detect.tagger import TaggerConfig, load_tagger, train_default_tagger

    cfg = TaggerConfig(model="tiny", layer=1, hidden=8, epochs=1)
    folder = train_default_tagger(tmp_path / "head", cfg, sentences=24, progress=False)
    meta = json.loads((folder / "tagger.json").read_text())
    assert meta["trained_on"]["sentences"] == 24 and meta["config"]["model"] == "tiny"
    assert len(load_tagger(folder).predict(["Ann Lee lives at 4 Elm Street, Leeds."])) == 1


@pytest.mark.fast
def test_a_missing_tagger_says_how_to_train_one(tmp_path):
    from privlm.detect.tagger import load_tagger
    from privlm.errors import PrivlmError

    with pytest.raises(PrivlmError, match="train-tagger"):
        load_tagger(tmp_path)


@pytest.mark.fast
def test_bridging_flags_the_punctuation_between_and_around_an_addresses_pieces():
    text = "at Via Brenna, 367, 23833, Pagnona (LC) today; Ann, Bo"
    spans = [Span(3, 13, "STREET_ADDRESS"), Span(15, 18, "STREET_ADDRESS"),
             Span(20, 25, "ZIP"), Span(27, 34, "GPE"), Span(36, 38, "GPE"), Span(47, 50, "PERSON"),
             Span(52, 54, "PERSON")]  # fmt: skip
    got = bridge_spans(text, spans)
    assert [text[s.start : s.end] for s in got] == [
        "Via Brenna, 367, 23833, Pagnona (LC)",
        "Ann, Bo",
    ]
    assert bridge_spans("a b  c", [Span(0, 1), Span(5, 6)]) == [Span(0, 1), Span(5, 6)]  # letters


@pytest.mark.fast
def test_pii_is_the_fast_detector_and_the_tagger_bridged():
    pii, fast = make_detector("pii"), make_detector("pii-fast")
    assert [d.name for d in pii.detectors] == [*(d.name for d in fast.detectors), "tagger"]
    assert pii.bridge and not fast.bridge


def test_the_pii_detector_meets_its_targets_on_held_out_text():
    """≥ 95 % full-span recall overall, ≥ 90 % for every structured type, at
    most 20 % of flagged characters outside PII, on templates and locales no recogniser was
    developed against (a fresh seed, too)."""
    q = evaluate_pii(make_detector("pii"), pii_corpus(300, seed=11, held_out=True))
    assert q.full_recall >= 0.95, q.recall_by_type
    for kind in STRUCTURED:
        assert q.recall_by_type[kind].full >= 0.90, (kind, q.recall_by_type[kind])
    assert q.over_redaction <= 0.20


def test_the_pii_detector_generalises_to_held_out_families_and_fresh_value_sources():
    """Names, street addresses and places on template families it was never trained or
    tuned on, filled from Faker locales nobody inspected: PERSON ≥ 0.95, STREET_ADDRESS and
    GPE ≥ 0.90 full-span recall, at most 20 % of flagged characters outside PII."""
    sample = family_corpus(300, HELDOUT_FAMILIES, FRESH_SOURCES, seed=23)
    q = evaluate_pii(make_detector("pii"), sample)
    targets = {"PERSON": 0.95, "STREET_ADDRESS": 0.90, "GPE": 0.90}
    for kind, target in targets.items():
        assert q.recall_by_type[kind].full >= target, (kind, q.recall_by_type[kind])
    assert q.over_redaction <= 0.20


@pytest.mark.fast
def test_the_tagger_reads_bfloat16_where_native_else_int8_with_vnni_else_float32(monkeypatch):
    from privlm.detect import tagger as tagger_module
    from privlm.errors import PrivlmError

    precision = tagger_module.feature_precision
    monkeypatch.delenv(tagger_module.PRECISION_ENV, raising=False)
    monkeypatch.setattr(tagger_module, "native_bf16", lambda: False)
    monkeypatch.setattr(tagger_module, "cpu_has_vnni", lambda: True)
    assert precision() == "int8"
    monkeypatch.setattr(tagger_module, "cpu_has_vnni", lambda: False)  # int8 would crawl
    assert precision() == "float32"
    monkeypatch.setattr(tagger_module, "cpu_has_vnni", lambda: True)
    monkeypatch.setattr(tagger_module, "native_bf16", lambda: True)
    assert precision() == "bfloat16"
    monkeypatch.setenv(tagger_module.PRECISION_ENV, "float32")
    assert precision() == "float32"
    monkeypatch.setenv(tagger_module.PRECISION_ENV, "int8")
    assert precision() == "int8"
    monkeypatch.setenv(tagger_module.PRECISION_ENV, "bfloat16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for, and native here: no warning
        assert precision() == "bfloat16"
    monkeypatch.setattr(tagger_module, "native_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="without native bfloat16"):
        assert precision() == "bfloat16"
    monkeypatch.setenv(tagger_module.PRECISION_ENV, "fp8")
    with pytest.raises(PrivlmError, match="float32, bfloat16, int8 or auto"):
        precision()


@pytest.mark.fast
def test_bfloat16_is_not_native_where_onednn_is_capped_below_it(monkeypatch):
    """A CPU with AVX512-BF16 under ``ONEDNN_MAX_CPU_ISA=AVX2`` emulates bfloat16: the
    automatic choice is then int8 (the CPU itself has VNNI), as on a CPU without bfloat16."""
    import torch

    from privlm.detect import tagger as tagger_module

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: True)  # such a CPU has it
    monkeypatch.delenv(tagger_module.PRECISION_ENV, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert tagger_module.native_bf16() and tagger_module.feature_precision() == "bfloat16"
    for cap in ("AVX2", "avx512_core_vnni"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert not tagger_module.native_bf16()
        assert tagger_module.feature_precision() == "int8"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert tagger_module.native_bf16()


@pytest.mark.fast
def test_int8_halves_its_ranges_where_onednn_runs_without_vnni(monkeypatch):
    from privlm.detect.int8 import runs_without_vnni as _without_vnni

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert _without_vnni()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core")
    assert _without_vnni()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    import torch

    assert _without_vnni() == (not torch.cpu._is_vnni_supported())
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: False)
    assert _without_vnni()


def test_int8_features_do_not_depend_on_the_batch_and_feed_the_head(tiny_tagger):
    """Per-token activation scales: a text's int8 features are the same alone and in a
    batch of others (a per-tensor scale would mix texts); they stay close to float32's,
    and the model's own weights are not touched."""
    import torch

    from privlm.detect.tagger import Tagger, in_precision

    tagger, _, corpus = tiny_tagger
    plain = tagger.featurizer
    body = plain.body
    weight = body.layers[0].mlp.up_proj.weight.detach().clone()
    int8 = copy.copy(plain)
    int8.body = in_precision(body, "int8")
    assert torch.equal(body.layers[0].mlp.up_proj.weight, weight)  # the model unchanged
    encoded = int8.encode([a.text for a in corpus[:8]])
    together = int8.features(encoded)
    for i, e in enumerate(encoded):
        assert torch.equal(int8.features([e])[0], together[i])
    exact = plain.features(encoded)
    for a, b in zip(together, exact, strict=True):
        assert a.dtype == torch.float32 and a.shape == b.shape
        assert (a - b).norm() / b.norm() < 0.2
    spans = Tagger(tagger.config, tagger.head, int8).predict([a.text for a in corpus[:8]])
    assert len(spans) == 8


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_the_copied_blocks_run_their_gated_mlps_in_place_to_the_same_bits(tiny_tagger, precision):
    """A precision copy's SiLU-gated MLPs compute silu(gate) · up in place: every block's
    output is the bits transformers' own MLP gives on the same copy."""
    import torch

    from privlm.detect.tagger import InPlaceGatedMLP, in_place_mlps, in_precision

    tagger, _, _ = tiny_tagger
    body = in_precision(tagger.featurizer.body, precision)
    mlps = [block.mlp for block in body.layers]
    assert all(isinstance(m, InPlaceGatedMLP) for m in mlps)
    assert in_place_mlps(body) == 0  # nothing left to replace
    plain = tagger.featurizer.body.layers[0].mlp
    width = plain.gate_proj.in_features
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    x = torch.randn(3, 7, width).to(dtype)
    for block in body.layers:
        m = block.mlp  # transformers' LlamaMLP.forward on the same projections:
        theirs = m.down_proj(plain.act_fn(m.gate_proj(x)) * m.up_proj(x))
        assert torch.equal(block.mlp(x.clone()), theirs)
    assert not isinstance(plain, InPlaceGatedMLP)  # the model's own blocks untouched


def test_a_head_trained_in_float32_runs_on_bfloat16_features(tiny_tagger, monkeypatch):
    """Heads are trained on float32 features; a bfloat16 body feeds the head float32
    features of the same shape, and ``describe`` says which precision ran."""
    import torch

    from privlm.detect.tagger import PRECISION_ENV, TaggerDetector, load_tagger

    _, folder, corpus = tiny_tagger
    monkeypatch.setenv(PRECISION_ENV, "bfloat16")
    tagger = load_tagger(folder)
    assert next(tagger.featurizer.body.parameters()).dtype == torch.bfloat16
    feats, _ = tagger.featurizer([corpus[0].text])
    assert feats[0].dtype == torch.float32
    assert len(tagger.predict([a.text for a in corpus[:4]])) == 4
    assert TaggerDetector(folder).describe()["precision"] == "bfloat16"


@pytest.mark.fast
def test_the_recorded_held_out_figures_are_of_the_shipped_head():
    """``heldout_recall.json`` (what JFT states) names the recipe version and layer of the
    head that ships: a new head without a new measurement fails here."""
    from privlm.detect.provenance import MEASURED, TAGGER_LAYER, TAGGER_VERSION
    from privlm.detect.tagger import PRECISIONS

    measured = json.loads(MEASURED.read_text())["tagger"]
    assert (measured["version"], measured["layer"]) == (TAGGER_VERSION, TAGGER_LAYER)
    assert measured["precision"] in PRECISIONS
