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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from privlm.errors import ModelLoadError
from privlm.models.memory import kv_cache_bytes, require_fits
from privlm.predict.engine import EnsembleEngine, model_router


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
        ids = input_ids.cpu()
        if seen == 0:  # the first pass writes the prompts into the cache
            ids = torch.cat([self._ids[index], ids], dim=1)
            positions = torch.cat(
                [(self._mask[index].cumsum(dim=1) - 1).clamp(min=0), positions], 1
            )
        device = self.device
        keep = {"logits_to_keep": 1 if last_only else steps}  # never the prompts' logits
        with self.router.lock:
            self.router.set(None, None)
            out = self.model(
                input_ids=ids.to(device),
                past_key_values=past_key_values,
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                use_cache=past_key_values is not None,
                **keep,
            )
        return out.logits, out.past_key_values if past_key_values is not None else None

    def _insert_prefix(self, given: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The caller's mask with each row's prompt mask put after its leading zeros (the
        caller's own left padding, which stacked caches keep in front of everything)."""
        width, length = self.prefix_width, given.shape[1]
        lead = (given.cumsum(dim=1) == 0).sum(dim=1, keepdim=True)
        rel = torch.arange(length + width)[None, :] - lead  # column relative to the prompt
        prompt = self._mask[index].gather(1, rel.clamp(0, width - 1))
        rest = given.gather(1, (rel + lead - width).clamp(0, length - 1))
        return torch.where(rel < 0, 0, torch.where(rel < width, prompt, rest))
