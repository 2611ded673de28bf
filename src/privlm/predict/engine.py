"""The batched ensemble engine: public model and LoRA adapters in one forward pass.

Every adapted projection of the base model is wrapped by :class:`StackedLoRA`, which holds
the A and B matrices of all N adapters stacked as (N, r, in) and (N, out, r). A batch row
names its adapter (−1 = none, the public model); the wrapper adds
``scaling · (x A_row^T) B_row^T`` to the base output for the rows that have one, with
batched matmuls. So one forward pass over the shared base weights evaluates the public model
and any set of adapters, with no ``set_adapter`` loop. KV caching works as for the base
model, since the wrapped model is the base model.

Several engines may share one base model (the service's deployments of one public model
keep one copy of its weights on the device): each attaches its own stack to the wrapped
projections, and a forward pass uses the stack of the engine that runs it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import DynamicCache, PreTrainedModel

from privlm.errors import ModelLoadError
from privlm.models.loading import ROUTER_ATTRIBUTE as ROUTER_ATTRIBUTE
from privlm.models.memory import kv_cache_bytes, require_fits


def upcast_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log-softmax in float64 over the last axis: logits from a bf16 or fp16 model are
    upcast *before* the softmax, so the mechanisms see the model's distribution to float64
    accuracy (their divergences, λ solves and mixtures all run in float64)."""
    return torch.log_softmax(logits.double(), dim=-1)


class RowRouter:
    """Which adapter stack, and which adapter of it, each batch row uses; one per base
    model, shared by all its wrapped projections and by every engine on that model. Its
    lock serialises forward passes through the model, since the routing is shared state."""

    def __init__(self) -> None:
        self.stack: int | None = None
        self.rows: torch.Tensor | None = None
        self.active: torch.Tensor | None = None
        self.block: AdapterBlock | None = None
        self.lock = threading.RLock()
        self.stacks = 0  # how many engines have attached a stack

    def set(
        self, stack: int | None, rows: torch.Tensor | None, device: torch.device | None = None
    ) -> None:
        """Route ``rows`` (one adapter index per batch row, −1: none) through ``stack``, on
        ``device``. The block layout is read from ``rows`` where they are (the host, for the
        engines); only another layout needs the active rows' indices on the device."""
        self.stack = stack
        self.block = None if rows is None else adapter_block(rows)
        self.rows = None if rows is None else rows.to(device)
        self.active = (
            None
            if self.rows is None or self.block is not None
            else torch.nonzero(self.rows >= 0).flatten()
        )


@dataclass(frozen=True)
class AdapterBlock:
    """Batch rows ``start … start+count−1`` use adapters ``first … first+count−1`` and every
    other row uses none: the layout of an ensemble's rows [public, member 1, …, member N].
    The LoRA delta then reads slices of the stacks and of the batch (views) instead of
    gathering both at every projection of every forward pass."""

    start: int
    first: int
    count: int


def adapter_block(rows: torch.Tensor) -> AdapterBlock | None:
    """The rows' :class:`AdapterBlock`, or None when they are not one (any other layout
    takes the general, gathering path). Read on the host: ``rows`` is small."""
    host = rows.tolist()
    active = [i for i, r in enumerate(host) if r >= 0]
    if not active:
        return None
    start, first, count = active[0], host[active[0]], len(active)
    if active[-1] - start + 1 != count or host[start : start + count] != list(
        range(first, first + count)
    ):
        return None
    return AdapterBlock(start, first, count)


def model_router(model: nn.Module) -> RowRouter:
    """The base model's router, made on first use (engines attach to the same one)."""
    router = getattr(model, ROUTER_ATTRIBUTE, None)
    if router is None:
        router = RowRouter()
        object.__setattr__(model, ROUTER_ATTRIBUTE, router)  # not a submodule or buffer
    return router


class StackedLoRA(nn.Module):
    """A base projection plus a per-row LoRA delta chosen from a stack of adapters. Several
    engines may attach stacks to one base (deployments sharing a public model's weights);
    the router names the stack in use, and rows of other stacks see the base alone."""

    def __init__(self, base: nn.Module, router: RowRouter) -> None:
        super().__init__()
        self.base = base
        self.router = router
        self.stacks: dict[int, tuple[torch.Tensor, torch.Tensor, float]] = {}

    def attach(self, key: int, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        """Add a stack: A (N, r, in) and B (N, out, r)."""
        self.stacks[key] = (a, b, scaling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.base(x)
        rows, active, block = self.router.rows, self.router.active, self.router.block
        stack = self.stacks.get(self.router.stack) if self.router.stack is not None else None
        if stack is None or rows is None:
            return y
        if block is None and (active is None or active.numel() == 0):
            return y  # no row uses an adapter
        lora_a, lora_b, scaling = stack
        y = y.clone() if y.requires_grad else y
        if block is not None:  # views, no gathers: the same arithmetic on the same values
            rows_of = slice(block.start, block.start + block.count)
            adapters = slice(block.first, block.first + block.count)
            a, b = lora_a[adapters], lora_b[adapters]
            delta = torch.bmm(torch.bmm(x[rows_of], a.transpose(1, 2)), b.transpose(1, 2))
            y[rows_of] += scaling * delta.to(y.dtype)
            return y
        idx = rows[active]
        xa = x[active]  # (R, T, in)
        delta = torch.bmm(torch.bmm(xa, lora_a[idx].transpose(1, 2)), lora_b[idx].transpose(1, 2))
        y[active] += scaling * delta.to(y.dtype)
        return y


@dataclass(frozen=True)
class AdapterSpec:
    rank: int
    alpha: float
    targets: tuple[str, ...]

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


def read_adapter(path: Path) -> tuple[AdapterSpec, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """A PEFT LoRA adapter directory → its spec and {module name: (A, B)}."""
    cfg_path, weights_path = path / "adapter_config.json", path / "adapter_model.safetensors"
    if not cfg_path.is_file() or not weights_path.is_file():
        raise ModelLoadError(
            f"{path}: not a PEFT adapter (needs adapter_config.json and adapter_model.safetensors)"
        )
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("peft_type") != "LORA" or cfg.get("use_rslora") or cfg.get("use_dora"):
        raise ModelLoadError(f"{path}: only plain LoRA adapters are supported")
    targets = cfg["target_modules"]
    spec = AdapterSpec(
        int(cfg["r"]),
        float(cfg["lora_alpha"]),
        tuple(sorted(targets if isinstance(targets, list) else [targets])),
    )
    tensors = load_file(str(weights_path))
    pairs: dict[str, list[torch.Tensor | None]] = {}
    for key, value in tensors.items():
        name = key.removeprefix("base_model.model.")
        for part, slot in ((".lora_A.weight", 0), (".lora_B.weight", 1)):
            if name.endswith(part):
                pairs.setdefault(name[: -len(part)], [None, None])[slot] = value
    out = {}
    for name, (a, b) in pairs.items():
        if a is None or b is None:
            raise ModelLoadError(f"{path}: LoRA weights of {name} are incomplete")
        out[name] = (a, b)
    return spec, out


class EnsembleEngine:
    """A base causal LM with N LoRA adapters stacked for row-wise batched evaluation."""

    prefix_width = 0  # hidden context columns in front of every row (in-context members)

    def __init__(
        self,
        model: PreTrainedModel,
        adapters: list[dict[str, tuple[torch.Tensor, torch.Tensor]]],
        spec: AdapterSpec,
    ) -> None:
        if not adapters:
            raise ModelLoadError("an ensemble needs at least one adapter")
        names = set(adapters[0])
        if any(set(a) != names for a in adapters):
            raise ModelLoadError("the adapters do not adapt the same modules")
        self.model = model.eval()
        self.spec = spec
        self.n_adapters = len(adapters)
        self.router = model_router(model)
        first = next(model.parameters())
        device, dtype = first.device, first.dtype
        stacked = sum(t.numel() for ad in adapters for pair in ad.values() for t in pair)
        require_fits(
            stacked * first.element_size(), device, f"{len(adapters)} stacked adapters",
            "use fewer adapters, a lower rank, or --dtype bfloat16",
        )  # fmt: skip
        with self.router.lock:
            self.key = self.router.stacks
            self.router.stacks += 1
            for name in sorted(names):
                parent_name, _, child = name.rpartition(".")
                parent = model.get_submodule(parent_name)
                wrapped = getattr(parent, child)
                if not isinstance(wrapped, StackedLoRA):  # the first engine on this model
                    wrapped = StackedLoRA(wrapped, self.router)
                    setattr(parent, child, wrapped)
                a = torch.stack([ad[name][0] for ad in adapters]).to(device=device, dtype=dtype)
                b = torch.stack([ad[name][1] for ad in adapters]).to(device=device, dtype=dtype)
                wrapped.attach(self.key, a, b, spec.scaling)

    @classmethod
    def from_directories(cls, model: PreTrainedModel, paths: list[Path]) -> EnsembleEngine:
        specs, weights = zip(*(read_adapter(Path(p)) for p in paths), strict=True)
        if len(set(specs)) != 1:
            raise ModelLoadError(f"the adapters differ in rank, alpha or targets: {set(specs)}")
        return cls(model, list(weights), specs[0])

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    @torch.no_grad()
    def logits(
        self,
        input_ids: torch.Tensor,
        rows: torch.Tensor,
        past_key_values: DynamicCache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, DynamicCache | None]:
        """Logits (B, T, V) for batch rows that each use adapter ``rows[b]`` (−1: none).
        ``attention_mask`` and ``position_ids`` let rows of different lengths share one
        left-padded cache (:mod:`privlm.predict.batching`). ``last_only``: the logits of the
        last position alone, (B, 1, V); a prefill needs no others, and the output layer over
        every position of a long prompt would cost T·V floats per row."""
        keep = {"logits_to_keep": 1} if last_only else {}
        if rows.shape[0] != input_ids.shape[0]:
            raise ValueError("one adapter index per batch row")
        if int(rows.max()) >= self.n_adapters or int(rows.min()) < -1:
            raise ValueError(f"adapter indices must lie in [-1, {self.n_adapters - 1}]")
        device = self.device  # inputs may be built anywhere; they run where the model is
        with self.router.lock:  # engines sharing the base model take turns
            self.router.set(self.key, rows, device)
            try:
                out = self.model(
                    input_ids=input_ids.to(device),
                    past_key_values=past_key_values,
                    attention_mask=None if attention_mask is None else attention_mask.to(device),
                    position_ids=None if position_ids is None else position_ids.to(device),
                    use_cache=past_key_values is not None,
                    **keep,
                )
            finally:
                self.router.set(None, None)
        return out.logits, out.past_key_values if past_key_values is not None else None

    def log_probs(self, context: list[int], rows: list[int]) -> torch.Tensor:
        """Next-token log-probabilities (len(rows), V) after ``context``, one batched pass;
        float64, whatever the model's dtype (privacy math never runs in half precision)."""
        ids = torch.tensor([context] * len(rows), dtype=torch.long)
        logits, _ = self.logits(ids, torch.tensor(rows, dtype=torch.long))
        return upcast_log_softmax(logits[:, -1])


PREFILL_CHUNK = 512  # prompt tokens per prefill pass


class Prefill:
    """A prompt's KV cache for ``rows``, built a chunk of tokens per forward pass.

    Chunks let a long prompt be interleaved with other work and stopped between passes (the
    service's scheduler); each pass computes the output layer for its last
    position only. The result equals one pass over the whole prompt up to float rounding
    (``tests/predict/test_batching.py``)."""

    def __init__(
        self, engine: EnsembleEngine, prompt: list[int], rows: list[int], reserve: int = 0
    ) -> None:
        """``reserve`` is how many tokens will follow, so a KV cache that cannot hold them all
        is refused before any work."""
        if not prompt:
            raise ValueError("the prompt must have at least one token")
        first = next(engine.model.parameters())
        require_fits(
            kv_cache_bytes(
                engine.model.config, first.dtype, len(rows),
                engine.prefix_width + len(prompt) + reserve,
            ),
            first.device, f"a KV cache of {len(rows)} rows × {len(prompt) + reserve} tokens",
            "use a shorter prompt, fewer tokens, or a smaller sample rate q",
        )  # fmt: skip
        self.engine, self.prompt = engine, prompt
        self.rows = torch.tensor(rows, dtype=torch.long)
        self.cache = DynamicCache()
        self.done = 0  # prompt tokens in the cache
        self.last: torch.Tensor | None = None  # (rows, V) log-probs once the prompt is in

    @property
    def finished(self) -> bool:
        return self.done == len(self.prompt)

    def advance(self, tokens: int = PREFILL_CHUNK) -> int:
        """Prefill up to ``tokens`` more prompt tokens in one pass; how many it took."""
        if tokens < 1 or self.finished:
            raise ValueError("advance takes at least one token of a prompt not yet prefilled")
        part = self.prompt[self.done : self.done + tokens]
        ids = torch.tensor([part] * len(self.rows), dtype=torch.long)
        logits, _ = self.engine.logits(ids, self.rows, self.cache, last_only=True)
        self.done += len(part)
        if self.finished:
            self.last = upcast_log_softmax(logits[:, -1])
        return len(part)

    def run(self, chunk: int = PREFILL_CHUNK) -> Prefill:
        """The whole prompt, ``chunk`` tokens per pass."""
        while not self.finished:
            self.advance(chunk)
        return self


class CachedDecoder:
    """Incremental decoding of one context for a fixed set of rows, with a KV cache."""

    def __init__(
        self, engine: EnsembleEngine, prompt: list[int], rows: list[int], reserve: int = 0
    ) -> None:
        """Prefill ``prompt`` for ``rows`` (:class:`Prefill`, a chunk per pass); ``reserve``
        is how many tokens will follow, so a KV cache that cannot hold them all is refused
        before any work."""
        prefill = Prefill(engine, prompt, rows, reserve).run()
        assert prefill.last is not None
        self.engine, self.rows, self.cache = engine, prefill.rows, prefill.cache
        self.last = prefill.last

    def keep(self, positions: list[int]) -> None:
        """Keep only the rows at ``positions`` (in their current order), cache included."""
        idx = torch.tensor(positions, dtype=torch.long)
        self.cache.batch_select_indices(idx)
        self.rows = self.rows[idx]
        self.last = self.last[idx]

    def advance(self, token: int) -> torch.Tensor:
        """Append ``token`` to every row; return the next-token log-probs (rows, V)."""
        ids = torch.full((len(self.rows), 1), token, dtype=torch.long)
        logits, _ = self.engine.logits(ids, self.rows, self.cache)
        self.last = upcast_log_softmax(logits[:, -1])
        return self.last
