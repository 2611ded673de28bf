"""In-context members: the public model prompted with the private records of one part.

An in-context ensemble has no training (Amin et al. 2024, "Private prediction for large-scale
synthetic text generation"; InvisibleInk 2025): member i is the public model conditioned on
the prompt P_i built from part i of the keyed-hash partition, so one privacy unit changes one
part, hence one member's prompt, hence one member's next-token distribution, which the
per-unit PMixED analysis already lets change arbitrarily (docs/sharp_edges.md, "In-context
members"). The public model is the row with no prompt.

:class:`InContextEngine` is a drop-in for :class:`~privlm.predict.engine.EnsembleEngine`:
the same ``logits``/``log_probs`` over rows (−1 the public model, i the member i), the same
KV caches, :class:`~privlm.predict.engine.Prefill`, :class:`CachedDecoder` and the
service's :class:`~privlm.predict.batching.DecodeBatch`. Every row's context carries a
hidden block of ``prefix_width`` columns in front of what its caller sees: the member's
prompt, left-padded (masked) to the longest prompt (the public row: all padding). The first
pass over an empty cache writes that block; later passes extend the caller's attention mask
with it (the caller's own left padding, from stacking generations, stays in front) and shift
each row's positions by its prompt's length. So a row's log-probabilities are those of its
member prompt followed by the context, decoded alone (``tests/predict/test_in_context.py``).

**The prompts are encoded once.** The hidden block's keys and values do not depend on what
follows it, so the engine computes them for every row on its first pass and keeps them; each
later pass over an empty cache starts from a copy of its rows' states instead of running
N prompts through the model again (a 256-token prompt costs twice a 128-token query's
work). The first pass does the same work whichever rows it asks for, so its time does not
tell a subset.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from privlm.errors import ModelLoadError
from privlm.models.memory import kv_cache_bytes, require_fits
from privlm.predict.engine import EnsembleEngine, model_router

SCORE_ROWS = 64  # rows per forward pass when no cache is kept (teacher-forced scoring)


class InContextEngine(EnsembleEngine):
    """A public causal LM and N member prompts, evaluated row-wise in one forward pass (an
    :class:`EnsembleEngine` whose members are prompts rather than adapters)."""

    def __init__(  # no adapter stack to attach: EnsembleEngine.__init__ is not called
        self,
        model: PreTrainedModel,
        prompts: Sequence[Sequence[int]],
        pad_id: int,
        width: int | None = None,
    ) -> None:
        """``width``: the hidden block's width (default: the longest prompt). A caller
        whose prompts are private and whose timing must not tell their lengths fixes it
        (``privlm.synth``)."""
        if not prompts:
            raise ModelLoadError("an in-context ensemble needs at least one member")
        longest = max(len(p) for p in prompts)
        if width is not None and width < longest:
            raise ValueError(f"a prompt of {longest} tokens does not fit the width {width}")
        self.model = model.eval()
        self.n_adapters = len(prompts)
        self.router = model_router(model)  # its lock: engines sharing the model take turns
        self.prefix_width = width = max(1, longest if width is None else width)
        first = next(model.parameters())
        require_fits(
            kv_cache_bytes(model.config, first.dtype, len(prompts) + 1, width),
            first.device, f"the prompts of {len(prompts)} in-context members",
            "use fewer members or shorter member prompts (--prompt-tokens)",
        )  # fmt: skip
        ids = torch.full((len(prompts) + 1, width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts) + 1, width), dtype=torch.long)
        for i, p in enumerate(prompts):  # row i + 1; row 0 (the public model) stays masked
            if p:
                ids[i + 1, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
                mask[i + 1, width - len(p) :] = 1
        self._ids, self._mask = ids, mask
        self._lengths = mask.sum(dim=1)
        self._prompt_states: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def _row_index(self, rows: torch.Tensor) -> torch.Tensor:
        if int(rows.max()) >= self.n_adapters or int(rows.min()) < -1:
            raise ValueError(f"member indices must lie in [-1, {self.n_adapters - 1}]")
        return rows.long() + 1

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
        """Logits (B, T, V) of the caller's T positions for rows ``rows`` (−1: the public
        model), as :meth:`EnsembleEngine.logits`; the member prompts stay hidden."""
        if rows.shape[0] != input_ids.shape[0]:
            raise ValueError("one member index per batch row")
        if past_key_values is None and rows.shape[0] > SCORE_ROWS:
            return self._logits_by_rows(input_ids, rows, attention_mask, position_ids, last_only)
        index = self._row_index(rows.cpu())
        steps = input_ids.shape[1]
        seen = 0 if past_key_values is None else past_key_values.get_seq_length()
        visible = seen - self.prefix_width if seen else 0  # the cache as the caller sees it
        given = (
            torch.ones((input_ids.shape[0], visible + steps), dtype=torch.long)
            if attention_mask is None
            else attention_mask.cpu().long()
        )
        mask = self._insert_prefix(given, index)
        if position_ids is None:
            position_ids = given.cumsum(dim=1)[:, -steps:] - 1
        positions = position_ids.cpu() + self._lengths[index][:, None]
        device = self.device
        keep = {"logits_to_keep": 1 if last_only else steps}
        with self.router.lock:
            self.router.set(None, None)
            cache = past_key_values
            if seen == 0:  # the caller's cache starts from its rows' prompt states
                cache = DynamicCache() if past_key_values is None else past_key_values
                for layer, (keys, values) in enumerate(self._states()):
                    at = index.to(keys.device)
                    cache.update(keys.index_select(0, at), values.index_select(0, at), layer)
            out = self.model(
                input_ids=input_ids.to(device),
                past_key_values=cache,
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                use_cache=True,
                **keep,
            )
        return out.logits, out.past_key_values if past_key_values is not None else None

    def _logits_by_rows(
        self,
        input_ids: torch.Tensor,
        rows: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        last_only: bool,
    ) -> tuple[torch.Tensor, None]:
        """A pass with no cache to keep, ``SCORE_ROWS`` rows at a time into one output: the
        prompts' keys and values are copied for a chunk of rows, never for all of them."""
        out: torch.Tensor | None = None
        for start in range(0, rows.shape[0], SCORE_ROWS):
            part = slice(start, start + SCORE_ROWS)
            logits, _ = self.logits(
                input_ids[part], rows[part], None,
                None if attention_mask is None else attention_mask[part],
                None if position_ids is None else position_ids[part], last_only,
            )  # fmt: skip
            if out is None:
                out = logits.new_empty((rows.shape[0], *logits.shape[1:]))
            out[part] = logits
        assert out is not None
        return out, None

    def _states(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every row's keys and values over the hidden block, per layer (computed on the
        first call, under the router's lock, then kept)."""
        if self._prompt_states is None:
            device = self.device
            positions = (self._mask.cumsum(dim=1) - 1).clamp(min=0)
            out = self.model(
                input_ids=self._ids.to(device),
                attention_mask=self._mask.to(device),
                position_ids=positions.to(device),
                past_key_values=DynamicCache(),
                use_cache=True,
                logits_to_keep=1,
            )
            self._prompt_states = [
                (layer.keys, layer.values) for layer in out.past_key_values.layers
            ]
        return self._prompt_states

    def _insert_prefix(self, given: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The caller's mask with each row's prompt mask put after its leading zeros (the
        caller's own left padding, which stacked caches keep in front of everything)."""
        width, length = self.prefix_width, given.shape[1]
        lead = (given.cumsum(dim=1) == 0).sum(dim=1, keepdim=True)
        rel = torch.arange(length + width)[None, :] - lead  # column relative to the prompt
        prompt = self._mask[index].gather(1, rel.clamp(0, width - 1))
        rest = given.gather(1, (rel + lead - width).clamp(0, length - 1))
        return torch.where(rel < 0, 0, torch.where(rel < width, prompt, rest))
