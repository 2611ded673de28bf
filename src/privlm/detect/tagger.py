"""A learned tagger for names, street addresses, places and organisations, on the public
model's own features.

The public model (SmolLM2-135M by default) reads each text once; the hidden states of one of
its layers feed a small bidirectional LSTM (the causal model sees only the left context; the
LSTM adds the right) and a linear BIO classifier over PERSON, STREET_ADDRESS, GPE and
ORGANIZATION. Only the head is trained, by privlm itself (:func:`train_tagger`), on the
development template families and value sources of :mod:`privlm.detect.pii_families`; the
held-out families measure it (docs/results.md). Nothing is downloaded: the default head
(0.7 MB) ships in the package (``detect/weights/``), made by privlm's own seeded recipe
(:func:`train_default_tagger`, recipe version ``TAGGER_VERSION``) from text privlm generates,
and is the head whose held-out figures ``heldout_recall.json`` states. ``privlm detect
train-tagger --out DIR`` rebuilds it (under 3 minutes on two CPU cores); a package whose
shipped head is of another recipe version trains the default once and caches it under
``$PRIVLM_CACHE/detect``.

The default head reads the features after ``TAGGER_LAYER`` = 5 blocks, the depth chosen on
development text as the deepest that keeps ``pii`` within twice ``pii-fast``'s time, and the
blocks run in bfloat16 where the CPU computes it natively, else with int8 matrix products
(:func:`feature_precision`).

Tokens map to characters by the tokenizer's offsets: a token is labelled with the gold span
it overlaps, and a predicted entity flags its tokens' characters, adjacent ones of a type
merged into one span.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from privlm.detect.annotated import AnnotatedText
from privlm.detect.base import Span, whole_words
from privlm.detect.fixed_rows import ROWS, fixed_row_linears, sharing_weights
from privlm.detect.int8 import Int8Linear, int8_mode, onednn_isa_cap, quantise_linears
from privlm.detect.legal_forms import complete_organisations
from privlm.detect.provenance import DEFAULT_SENTENCES, TAGGER_LAYER, TAGGER_VERSION
from privlm.errors import PrivlmError

TYPES = ("PERSON", "STREET_ADDRESS", "GPE", "ORGANIZATION")
LABELS = ("O", *(f"{p}-{t}" for t in TYPES for p in ("B", "I")))
VERSION = TAGGER_VERSION


@dataclass(frozen=True)
class TaggerConfig:
    """The tagger's settings, saved beside its head."""

    model: str = "smollm2-135m"
    layer: int = TAGGER_LAYER  # the features after this many blocks
    hidden: int = 64
    epochs: int = 6
    learning_rate: float = 3e-3
    batch_size: int = 32
    max_tokens: int = 256
    seed: int = 0


class TaggerHead(nn.Module):
    """BiLSTM over the layer's features, then a linear BIO classifier."""

    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.lstm = nn.LSTM(features, hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(2 * hidden, len(LABELS))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(
            self.norm(x), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        logits: torch.Tensor = self.out(self.drop(h))
        return logits


def truncated_body(causal_lm: Any, layers: int) -> nn.Module:
    """The causal model's body cut after ``layers`` blocks, sharing its weights (a shallow
    copy with a shorter block list): the tagger reads that depth and no deeper, so the
    blocks above it are never run."""
    body = getattr(causal_lm, "model", causal_lm)
    blocks = getattr(body, "layers", None)
    if not isinstance(blocks, nn.ModuleList) or not 1 <= layers <= len(blocks):
        raise PrivlmError(f"cannot read layer {layers} of a {type(causal_lm).__name__}")
    cut: nn.Module = copy.copy(body)
    cut._modules = dict(body._modules)
    cut.layers = nn.ModuleList(list(blocks)[:layers])
    config = copy.copy(body.config)
    config.num_hidden_layers = layers
    cut.config = config
    return cut


PRECISION_ENV = "PRIVLM_TAGGER_DTYPE"
PRECISIONS = ("float32", "bfloat16", "int8")


ONEDNN_WITHOUT_BF16 = (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
)  # fmt: skip


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), and oneDNN may
    use it: an ``ONEDNN_MAX_CPU_ISA`` below AVX512_CORE_BF16 leaves it emulated, about 8x
    slower than int8 (docs/results.md)."""
    if onednn_isa_cap() in ONEDNN_WITHOUT_BF16:
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def cpu_has_vnni() -> bool:
    """Whether the CPU itself has VNNI (AVX512-VNNI). Without it, torch's int8 product
    (``torch._int_mm``) falls back to a path about 40x slower than float32's on the AVX2
    CPUs measured (docs/results.md); a cap by ``ONEDNN_MAX_CPU_ISA`` on a CPU with VNNI
    does not (it only halves int8's ranges: :func:`privlm.detect.int8.runs_without_vnni`)."""
    return bool(torch.cpu._is_vnni_supported())


def feature_precision() -> str:
    """The precision the tagger reads the public model in on the CPU: "bfloat16" where the
    CPU computes it natively; else "int8" where the CPU has VNNI (the blocks' linear layers
    with int8 weights per output channel and int8 activations per token,
    :mod:`privlm.detect.int8`), faster than float32 there with held-out recall within 0.025
    of float32's on every type; else "float32", the fastest where neither runs natively
    (docs/results.md). ``PRIVLM_TAGGER_DTYPE`` (float32, bfloat16, int8 or auto)
    overrides. Heads are trained on float32 features either way
    (:func:`train_default_tagger`), so the recipe is the same on every machine."""
    asked = os.environ.get(PRECISION_ENV, "auto").strip().lower() or "auto"
    if asked not in ("auto", *PRECISIONS):
        raise PrivlmError(f"{PRECISION_ENV} is float32, bfloat16, int8 or auto, not {asked!r}")
    if asked == "auto":
        if native_bf16():
            return "bfloat16"
        return "int8" if cpu_has_vnni() else "float32"
    if asked == "bfloat16" and not native_bf16():
        warnings.warn(
            f"{PRECISION_ENV}=bfloat16 on a CPU without native bfloat16 (AVX512-BF16 or AMX): "
            "the tagger runs emulated, slower than in int8 or float32; unset it to use "
            "the fastest here",
            RuntimeWarning,
            stacklevel=2,
        )
    return asked


def in_precision(body: nn.Module, precision: str) -> nn.Module:
    """``body`` in ``precision``: itself where it already is, else a copy (the model's own
    weights never change). bfloat16: weights and activations; int8: the linear layers'
    weights per output channel and their inputs per token, so no text's scale depends on
    another's, the rest in float32. The rotary frequencies stay float32.
    A copy's gated MLPs run in place (:class:`InPlaceGatedMLP`)."""
    if precision not in PRECISIONS:
        raise PrivlmError(f"the tagger runs in float32, bfloat16 or int8, not {precision!r}")
    target = torch.bfloat16 if precision == "bfloat16" else torch.float32
    copied = next(body.parameters()).dtype != target
    if copied:
        body = copy.deepcopy(body)
        for name, module in body.named_children():
            if "rotary" not in name:  # its frequencies stay float32
                module.to(target)
    if precision == "int8":
        body = body if copied else copy.deepcopy(body)
        quantise_linears(body, int8_mode())
    if copied or precision == "int8":
        in_place_mlps(body)
    return body


class InPlaceGatedMLP(nn.Module):
    """A Llama-style gated MLP, ``down(silu(gate(x)) · up(x))``, with the SiLU and the
    product computed in place on the gate's output: the same bits as transformers' own
    (the same kernels), two fewer tensors of the intermediate width per block. Only for
    the tagger's copies of the blocks, which nothing trains."""

    gate_proj: nn.Module
    up_proj: nn.Module
    down_proj: nn.Module

    def __init__(self, mlp: Any) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = nn.functional.silu(self.gate_proj(x), inplace=True)
        out: torch.Tensor = self.down_proj(gate.mul_(self.up_proj(x)))
        return out


def _is_silu_gated(module: nn.Module) -> bool:
    parts = ("gate_proj", "up_proj", "down_proj", "act_fn")
    if not all(hasattr(module, p) for p in parts):
        return False
    act = module.act_fn
    return isinstance(act, nn.SiLU) or type(act).__name__ == "SiLUActivation"


def in_place_mlps(body: nn.Module) -> int:
    """Replace every SiLU-gated MLP inside ``body`` by an :class:`InPlaceGatedMLP` over
    the same projections; how many were replaced."""
    replaced = 0
    for parent in list(body.modules()):
        for name, child in list(parent.named_children()):
            if _is_silu_gated(child):
                setattr(parent, name, InPlaceGatedMLP(child))
                replaced += 1
    return replaced


class Encoded(NamedTuple):
    """One text's token ids and each token's character offsets."""

    ids: list[int]
    offsets: list[tuple[int, int]]


def same_length_batches(encoded: Sequence[Encoded], size: int) -> list[list[int]]:
    """Indices in batches of at most ``size`` texts of one token count each (ties in the
    order given): nothing is padded, so a text's features and spans are, to the bit, those
    it gets alone, whoever else is in the corpus. Padding would not leak a text into
    another's row, but the attention's rounding moves with the padded width, so a text's
    spans would depend on the other texts' lengths (docs/sharp_edges.md)."""
    batches: list[list[int]] = []
    for j in by_token_count(encoded):
        last = batches[-1] if batches else None
        if last and len(last) < size and len(encoded[last[0]].ids) == len(encoded[j].ids):
            last.append(j)
        else:
            batches.append([j])
    return batches


def by_token_count(encoded: Sequence[Encoded]) -> list[int]:
    """Indices in order of token count (ties in the order given): a batch pads to its
    longest text, and padding is work. Character length is a poor proxy for it (a third of
    the blocks' work on the held-out families was padding when batches were cut by
    characters, docs/results.md)."""
    return sorted(range(len(encoded)), key=lambda j: len(encoded[j].ids))


def in_fixed_rows(body: nn.Module, rows: int = ROWS) -> nn.Module:
    """``body`` with every matrix product of its linear layers (float or int8) run in calls
    of exactly ``rows`` rows (:mod:`privlm.detect.fixed_rows`), so that a token's features
    are a function of its own text alone on every CPU; a copy sharing the weights."""
    body = sharing_weights(body)
    fixed_row_linears(body, rows)
    for module in body.modules():
        if isinstance(module, Int8Linear):
            module.rows = rows
    return body


class Featurizer:
    """The public model's hidden states after ``layer`` blocks (final norm applied), with
    each token's character offsets; the blocks run in ``precision`` (a copy of them,
    :func:`in_precision`; None: the model's own), and the features are float32 whatever
    it is. ``rows``: the linear layers' products run in calls of that many rows
    (:func:`in_fixed_rows`: each text's features are those it gets alone; None: one call
    per layer, as training reads its generated corpus)."""

    def __init__(
        self, model: Any, tokenizer: Any, layer: int, max_tokens: int,
        precision: str | None = None, rows: int | None = None,
    ) -> None:  # fmt: skip
        body = truncated_body(model, layer)
        body = body if precision is None else in_precision(body, precision)
        self.body = body if rows is None else in_fixed_rows(body, rows)
        self.tokenizer, self.max_tokens = tokenizer, max_tokens
        if not getattr(tokenizer, "is_fast", False):
            raise PrivlmError("the tagger needs a fast tokenizer (character offsets)")
        if tokenizer.pad_token_id is None:
            raise PrivlmError("the tagger needs a tokenizer with a padding token")

    def encode(self, texts: Sequence[str]) -> list[Encoded]:
        """Each text's token ids and their character offsets, truncated to ``max_tokens``,
        unpadded: tokenized once, then ordered and batched by :meth:`features`' callers."""
        enc = self.tokenizer(
            list(texts), add_special_tokens=False, return_offsets_mapping=True,
            truncation=True, max_length=self.max_tokens,
        )  # fmt: skip
        return [
            Encoded(ids, [tuple(o) for o in offs])
            for ids, offs in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
        ]

    @torch.no_grad()
    def features(self, encoded: Sequence[Encoded]) -> list[torch.Tensor]:
        """Each encoded text's features (tokens × hidden size), run as one batch padded on
        the right to its longest text and masked. No text reads another (causal
        attention), but the rounding moves with the padded width: only a batch of one
        token count gives each text, to the bit, its features alone
        (:func:`same_length_batches`)."""
        width = max(len(e.ids) for e in encoded)
        ids = torch.full((len(encoded), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
            mask[i, : len(e.ids)] = 1
        device = next(self.body.parameters()).device
        out = self.body(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
        hidden = out.last_hidden_state.float().cpu()
        return [hidden[i, : len(e.ids)] for i, e in enumerate(encoded)]

    def __call__(
        self, texts: Sequence[str]
    ) -> tuple[list[torch.Tensor], list[list[tuple[int, int]]]]:
        encoded = self.encode(texts)
        return self.features(encoded), [e.offsets for e in encoded]


def token_labels(offsets: list[tuple[int, int]], spans: Sequence[Span]) -> list[int]:
    """BIO label ids of each token: the type of the gold span it overlaps (B on a span's
    first token)."""
    out = []
    for start, end in offsets:
        label = 0
        for s in spans:
            if s.label in TYPES and start < s.end and s.start < end:
                begin = start <= s.start
                label = LABELS.index(f"{'B' if begin else 'I'}-{s.label}")
                break
        out.append(label)
    return out


def decode(text: str, offsets: list[tuple[int, int]], labels: list[int]) -> list[Span]:
    """Character spans of the tagged tokens, adjacent tokens of one type joined when only
    spaces or punctuation lie between them; leading and trailing spaces dropped."""
    spans: list[Span] = []
    for (start, end), lab in zip(offsets, labels, strict=True):
        if lab == 0 or end <= start:
            continue
        kind = LABELS[lab].split("-", 1)[1]
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end <= start:
            continue
        if spans and spans[-1].label == kind and _joinable(text[spans[-1].end : start]):
            spans[-1] = Span(spans[-1].start, end, kind)
        else:
            spans.append(Span(start, end, kind))
    return spans


def _joinable(gap: str) -> bool:
    return len(gap) <= 3 and all(c.isspace() or c in ",.-'/#" for c in gap)


@dataclass
class Tagger:
    """A trained head and the featurizer it reads."""

    config: TaggerConfig
    head: TaggerHead
    featurizer: Featurizer

    @torch.no_grad()
    def predict(self, texts: Sequence[str], batch: int = 16) -> list[list[Span]]:
        """Spans per text, in the order given: each text's are those it gets alone, to the
        bit, whatever the other texts (batches of one token count,
        :func:`same_length_batches`). At most 16 texts a batch keeps a block's
        intermediate tensors small (docs/results.md)."""
        self.head.eval()
        out: list[list[Span]] = [[] for _ in texts]
        encoded = self.featurizer.encode(texts)
        for idx in same_length_batches(encoded, batch):
            x, lengths = _pad(self.featurizer.features([encoded[j] for j in idx]))
            labels = self.head(x, lengths).argmax(-1)
            for row, j in enumerate(idx):
                n = int(lengths[row])
                out[j] = decode(texts[j], encoded[j].offsets, labels[row, :n].tolist())
        return out

    def save(self, folder: str | Path, trained_on: dict[str, Any]) -> Path:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.half() for k, v in self.head.state_dict().items()}
        torch.save(state, path / "head.pt")
        meta = {"version": VERSION, "labels": list(LABELS), "config": asdict(self.config),
                "features": self.head.norm.normalized_shape[0], "trained_on": trained_on}  # fmt: skip
        (path / "tagger.json").write_text(json.dumps(meta, indent=2))
        return path


def _pad(feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(f) for f in feats])
    x = nn.utils.rnn.pad_sequence(feats, batch_first=True)
    return x, lengths


SHIPPED = Path(__file__).parent / "weights" / f"tagger-{TaggerConfig().model}"


def shipped_version(folder: Path = SHIPPED) -> str | None:
    """The recipe version of the head in ``folder`` (None when there is none)."""
    meta = folder / "tagger.json"
    return str(json.loads(meta.read_text()).get("version")) if meta.is_file() else None


def default_folder() -> Path:
    """The default tagger: the head shipped in the package when it is of this recipe
    version, else where the default is cached (trained there on first use)."""
    if shipped_version() == VERSION:
        return SHIPPED
    from privlm.settings import cache_dir

    return cache_dir() / "detect" / f"tagger-{TaggerConfig().model}-v{VERSION}"


def train_default_tagger(
    out: str | Path, config: TaggerConfig | None = None, sentences: int = DEFAULT_SENTENCES,
    progress: bool = True,
) -> Path:  # fmt: skip
    """Train a tagger on the development families and value sources only (never the
    held-out ones), and write it to ``out`` atomically."""
    from privlm.detect.pii_families import DEV_FAMILIES, DEV_SOURCES, family_corpus
    from privlm.fsutil import write_directory_atomically
    from privlm.models import load_public_model

    cfg = config or TaggerConfig()
    corpus = family_corpus(
        sentences, DEV_FAMILIES, DEV_SOURCES, cfg.seed, negatives=0.05, figure_rows=0.025
    )
    model = load_public_model(cfg.model, device="cpu", dtype="float32")
    tagger = train_tagger(model, corpus, cfg, progress)
    trained_on = {"families": sorted(DEV_FAMILIES), "sources": list(DEV_SOURCES),
                  "sentences": sentences, "seed": cfg.seed}  # fmt: skip
    path = Path(out)
    write_directory_atomically(path, lambda tmp: tagger.save(tmp, trained_on))
    return path


def load_tagger(folder: str | Path | None = None, model: Any = None) -> Tagger:
    """The tagger saved in ``folder`` (by default the shipped head, or the cached default
    one, trained there first if it is not yet), on ``model`` (a LoadedModel; loaded by its
    saved name when None). On the CPU its blocks run in :func:`feature_precision`."""
    if folder is None:
        folder = default_folder()
        if not (folder / "tagger.json").is_file():
            import sys

            print(f"privlm: training the name and address tagger once (cached in {folder})",
                  file=sys.stderr)  # fmt: skip
            train_default_tagger(folder)
    path = Path(folder)
    meta_file = path / "tagger.json"
    if not meta_file.is_file():
        raise PrivlmError(
            f"no trained tagger in {path}: train one with `privlm detect train-tagger`"
        )
    meta = json.loads(meta_file.read_text())
    if meta.get("labels") != list(LABELS):
        raise PrivlmError(f"the tagger in {path} has other labels than this privlm's")
    cfg = TaggerConfig(**meta["config"])
    if model is None:
        from privlm.models import load_public_model

        model = load_public_model(cfg.model, device="cpu", dtype="float32")
    head = TaggerHead(int(meta["features"]), cfg.hidden)
    state = torch.load(path / "head.pt", map_location="cpu", weights_only=True)
    head.load_state_dict({k: v.float() for k, v in state.items()})
    on_cpu = next(model.model.parameters()).device.type == "cpu"
    precision = feature_precision() if on_cpu else None
    featurizer = Featurizer(
        model.model, model.tokenizer, cfg.layer, cfg.max_tokens, precision, rows=ROWS
    )
    return Tagger(cfg, head, featurizer)


def train_tagger(
    model: Any, corpus: Sequence[AnnotatedText], config: TaggerConfig | None = None,
    progress: bool = True,
) -> Tagger:  # fmt: skip
    """Train the head on ``corpus`` (the public model frozen; its features computed once)."""
    from privlm.progress import progress_bar

    cfg = config or TaggerConfig()
    if not corpus:
        raise PrivlmError("the tagger needs training texts")
    featurizer = Featurizer(model.model, model.tokenizer, cfg.layer, cfg.max_tokens)
    # batches of similar length pad little (the corpus is generated text: padding's
    # rounding, docs/sharp_edges.md, does not matter here)
    encoded = featurizer.encode([c.text for c in corpus])
    order = by_token_count(encoded)
    found: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    starts = range(0, len(order), cfg.batch_size)
    for i in progress_bar(starts, desc="tagger features", disable=not progress):
        batch = order[i : i + cfg.batch_size]
        f = featurizer.features([encoded[j] for j in batch])
        for j, x in zip(batch, f, strict=True):
            tags = token_labels(encoded[j].offsets, corpus[j].sensitive)
            found[j] = (x, torch.tensor(tags))
    feats = [found[j][0] for j in range(len(corpus))]
    labels = [found[j][1] for j in range(len(corpus))]
    torch.manual_seed(cfg.seed)
    head = TaggerHead(feats[0].shape[-1], cfg.hidden)
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.learning_rate, weight_decay=1e-4)
    order = list(range(len(feats)))
    rng = random.Random(cfg.seed)
    steps = cfg.epochs * math.ceil(len(order) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.learning_rate, total_steps=steps)
    bar = progress_bar(total=steps, desc="tagger head", disable=not progress)
    head.train()
    for _ in range(cfg.epochs):
        rng.shuffle(order)
        for i in range(0, len(order), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            x, lengths = _pad([feats[j] for j in idx])
            y = nn.utils.rnn.pad_sequence([labels[j] for j in idx], batch_first=True,
                                          padding_value=-100)  # fmt: skip
            loss = nn.functional.cross_entropy(
                head(x, lengths).reshape(-1, len(LABELS)), y.reshape(-1), ignore_index=-100
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    head.eval()
    return Tagger(cfg, head, featurizer)


class TaggerDetector:
    """The tagger as a detector (``tagger``): PERSON, STREET_ADDRESS, GPE, ORGANIZATION."""

    name = "tagger"

    def __init__(self, folder: str | Path | None = None) -> None:
        self._folder = None if folder is None else Path(folder)
        self._tagger: Tagger | None = None

    @property
    def folder(self) -> Path:
        return default_folder() if self._folder is None else self._folder

    @property
    def tagger(self) -> Tagger:
        if self._tagger is None:
            self._tagger = load_tagger(self._folder)
        return self._tagger

    def detect(self, texts: Sequence[str]) -> list[list[Span]]:
        found = self.tagger.predict(texts)
        return [
            complete_organisations(t, whole_words(t, s)) for t, s in zip(texts, found, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        meta = json.loads((self.folder / "tagger.json").read_text())
        return {"name": self.name, "version": meta["version"], "model": meta["config"]["model"],
                "layer": meta["config"]["layer"], "precision": feature_precision(),
                "trained_on": meta["trained_on"]}  # fmt: skip
