"""DP-SGD's one step loop, through Opacus, for every private fine-tune in privlm: LoRA
adapters (:mod:`privlm.training.dpsgd`, JFT's phases) and soft prompts or prefixes
(:mod:`privlm.prompting.prompt_dpsgd`). A caller gives its module, its examples and its
per-example loss; the loop does the rest, the same way for both:

- Poisson batches (Opacus's DP data loader), or batches drawn in lockstep across ranks under
  ``torchrun`` (DPDDP) and from CSPRNG coins in secure mode
  (:mod:`privlm.training.distributed_dp`, :mod:`privlm.training.secure_noise`);
- per-example clipping by hooks or by ghost clipping, Gaussian noise at σ, physical batches
  (Opacus's ``BatchMemoryManager``), a noise-only step for an empty Poisson batch;
- no silent failure: a non-finite loss stops training (nothing is released), every
  trainable parameter must hold a per-sample gradient after the first backward pass and
  must have moved after the first step.

``private=False`` is the non-private baseline a caller asks for by name (PromptDPSGD's
``noise="none"``): the same examples and loss, shuffled batches, no clipping, no noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from opacus import PrivacyEngine
from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
from opacus.utils.batch_memory_manager import BatchMemoryManager
from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from privlm.errors import PrivlmError
from privlm.models.known_warnings import quiet_during_dp_fit
from privlm.progress import LossMeter, progress_bar
from privlm.randomness import PrivacyRandomness
from privlm.training.distributed_dp import LockstepPoissonSampler, collate_with_empty
from privlm.training.secure_noise import install_csprng_noise

# (the model as Opacus wrapped it, one batch on the device) -> each example's loss, (B,)
PerExampleLoss = Callable[[torch.nn.Module, tuple[torch.Tensor, ...]], torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class DpLoop:
    """How one run trains: its planned σ, q and steps, and the settings of the step loop
    (from the job's :class:`~privlm.training.config.DpSgdPrivacy`)."""

    sigma: float
    sample_rate: float
    steps: int
    epochs: int
    batch_size: int
    physical_batch_size: int
    max_grad_norm: float
    learning_rate: float
    grad_sample_mode: str = "hooks"
    secure_mode: bool = False
    private: bool = True

    @classmethod
    def of(cls, cfg: Any, sigma: float, q: float, steps: int, private: bool = True) -> DpLoop:
        """The loop a config's settings give (any :class:`DpSgdPrivacy`)."""
        return cls(
            sigma=sigma, sample_rate=q, steps=steps, epochs=cfg.epochs,
            batch_size=cfg.batch_size, physical_batch_size=cfg.physical_batch_size,
            max_grad_norm=cfg.max_grad_norm, learning_rate=cfg.learning_rate,
            grad_sample_mode=getattr(cfg, "grad_sample_mode", "hooks"),
            secure_mode=cfg.secure_mode, private=private,
        )  # fmt: skip


def _loader(
    examples: TorchDataset[tuple[torch.Tensor, ...]],
    loop: DpLoop,
    rank_world: tuple[int, int],
    rng: PrivacyRandomness,
) -> DataLoader[Any]:
    rank, world = rank_world
    n = len(examples)  # type: ignore[arg-type]
    if loop.private and (world > 1 or loop.secure_mode):
        # torchrun: Poisson batches drawn in lockstep (distributed_dp); secure mode: the same
        # sampler with CSPRNG coins
        coins = None if loop.secure_mode else rng.torch_generator()
        sampler = LockstepPoissonSampler(
            n, loop.sample_rate, round(1 / loop.sample_rate), rank, world, coins
        )
        return DataLoader(
            examples, batch_sampler=sampler, collate_fn=collate_with_empty(examples[0])
        )
    # Opacus redraws these as Poisson batches with the loader's generator (private); a
    # non-private baseline shuffles
    return DataLoader(
        examples, batch_size=loop.batch_size, shuffle=not loop.private,
        generator=rng.torch_generator(),
    )  # fmt: skip


def _empty_step(trainable: list[tuple[str, torch.nn.Parameter]], ghost: bool) -> None:
    """An empty Poisson batch: the step is noise only (its gradient zero, its clipping
    nothing to do)."""
    for _, p in trainable:
        if ghost:
            p.grad = torch.zeros_like(p)
        else:
            p.grad_sample = torch.zeros(  # type: ignore[attr-defined]  # Opacus's attribute
                (0, *p.shape), dtype=p.dtype, device=p.device
            )


def _finite(losses: torch.Tensor, step: int) -> None:
    if not bool(torch.isfinite(losses.detach()).all()):
        raise PrivlmError(
            f"the training loss is not finite at step {step + 1}: training stopped and "
            "nothing was released; lower the learning rate"
        )


@quiet_during_dp_fit()  # two notices every run causes (privlm.models.known_warnings)
def dp_fit(
    model: torch.nn.Module,
    examples: TorchDataset[tuple[torch.Tensor, ...]],
    loop: DpLoop,
    loss: PerExampleLoss,
    *,
    rng: PrivacyRandomness,
    device: torch.device,
    rank_world: tuple[int, int] = (0, 1),
    progress: bool = True,
    desc: str = "dp-sgd",
) -> None:
    """Train ``model``'s trainable parameters on ``examples`` as ``loop`` says (the module
    docstring), with ``loss`` giving each example's loss."""
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    loader = _loader(examples, loop, rank_world, rng)
    optimizer: Any = torch.optim.AdamW(
        [p for _, p in trainable], lr=loop.learning_rate, weight_decay=0.0
    )
    dp_model: Any = model
    ghost = loop.private and loop.grad_sample_mode == "ghost"
    if loop.private:
        module = DPDDP(model) if rank_world[1] > 1 else model
        private = PrivacyEngine(accountant="rdp").make_private(
            module=module, optimizer=optimizer, data_loader=loader,
            noise_multiplier=loop.sigma, max_grad_norm=loop.max_grad_norm,
            poisson_sampling=rank_world[1] == 1 and not loop.secure_mode,  # else: our sampler
            grad_sample_mode=loop.grad_sample_mode,
            noise_generator=None if loop.secure_mode else rng.torch_generator(device),
        )  # fmt: skip
        # ghost mode also returns a criterion wrapper; the loss is built per example here
        dp_model, optimizer, loader = private[0], private[1], private[-1]
        if loop.secure_mode:
            install_csprng_noise(optimizer)
    before = {name: p.detach().clone() for name, p in trainable}
    checked_grads = checked_moves = False
    dp_model.train()
    bar = progress_bar(total=loop.steps, desc=desc, unit="step", disable=not progress)
    meter, step = LossMeter(), 0
    for _ in range(loop.epochs):
        batches: Any = _Plain(loader)
        if loop.private:
            batches = BatchMemoryManager(
                data_loader=loader,
                max_physical_batch_size=loop.physical_batch_size,
                optimizer=optimizer,
            )
        with batches as physical:
            for batch in physical:
                optimizer.zero_grad(set_to_none=True)
                if len(batch[0]) == 0:
                    _empty_step(trainable, ghost)
                else:
                    losses = loss(dp_model, tuple(t.to(device) for t in batch))
                    _finite(losses, step)
                    if ghost:  # two backward passes: norms, then the clipped sum
                        DPTensorFastGradientClipping(dp_model, optimizer, losses, "mean").backward()
                    else:
                        losses.mean().backward()  # each example one term, as DP-SGD clips
                    meter.add(losses.detach().sum(), len(losses))
                    if loop.private and not checked_grads:
                        _require_per_sample_gradients(trainable, ghost)
                        checked_grads = True
                optimizer.step()
                if not getattr(optimizer, "_is_last_step_skipped", False):
                    step += 1
                    bar.update(1)
                    meter.report(bar)
                    if not checked_moves:
                        _require_moved(trainable, before)
                        checked_moves = True
    bar.close()


class _Plain:
    """A non-private loader in the shape of Opacus's BatchMemoryManager (a context)."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader

    def __enter__(self) -> DataLoader[Any]:
        return self.loader

    def __exit__(self, *exc: object) -> None:
        return None


def _require_per_sample_gradients(
    trainable: list[tuple[str, torch.nn.Parameter]], ghost: bool
) -> None:
    seen = "_norm_sample" if ghost else "grad_sample"
    missing = [name for name, p in trainable if getattr(p, seen, None) is None]
    if missing:
        raise PrivlmError(
            f"no per-sample gradient for {missing[:5]}: DP-SGD would silently skip them"
        )


def _require_moved(
    trainable: list[tuple[str, torch.nn.Parameter]], before: dict[str, torch.Tensor]
) -> None:
    frozen = [name for name, p in trainable if torch.equal(p.detach(), before[name])]
    if frozen:
        raise PrivlmError(f"parameters did not change after a DP-SGD step: {frozen[:5]}")
