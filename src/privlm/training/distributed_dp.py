"""DP-SGD across processes: Opacus's DPDDP under torchrun, over NCCL on CUDA GPUs (one GPU
per process, ``cuda:$LOCAL_RANK``) and gloo on CPUs.

- Each process trains on its shard of the examples (index ``i`` belongs to rank
  ``i mod world``); Opacus's distributed optimizer sums the clipped gradients over ranks,
  and only rank 0 adds the Gaussian noise, so the step is the single-process DP-SGD step.
- Sampling is Poisson over the whole dataset: each example joins each logical batch
  independently with probability q, whichever rank holds it. ``LockstepPoissonSampler``
  draws it per rank and, unlike Opacus's distributed sampler, also yields *empty* batches,
  so every rank takes every logical step (Opacus skips a rank's empty batch, which would
  leave the ranks out of step at the gradient all-reduce, and the step count would no
  longer be the accounted one).
- Only rank 0 charges the ledger and writes the adapter; before that, the ranks check that
  their parameters are still identical (``replicas_agree``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Sampler
from torch.utils.data._utils.collate import default_collate

from privlm.errors import PrivlmError
from privlm.training.secure_noise import poisson_coins


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def distributed_backend(device: torch.device) -> str:
    """NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(device: torch.device) -> torch.device:
    """This process's device under torchrun: its own GPU (``cuda:$LOCAL_RANK``) when the
    run is on CUDA, the CPU otherwise."""
    if device.type != "cuda" or world_size_from_env() <= 1:
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise PrivlmError(
            f"process LOCAL_RANK={local} has no GPU of its own ({torch.cuda.device_count()} "
            "visible); start torchrun with --nproc-per-node at most the number of GPUs"
        )
    return torch.device("cuda", local)


def init_distributed(device: torch.device | None = None) -> tuple[int, int]:
    """(rank, world size); under torchrun, starts the process group for ``device``'s
    backend (NCCL for CUDA, gloo for the CPU)."""
    world = world_size_from_env()
    if world <= 1:
        return 0, 1
    if not dist.is_available():
        raise PrivlmError("this torch build has no torch.distributed")
    dev = device if device is not None else torch.device("cpu")
    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(distributed_backend(dev))
    return dist.get_rank(), dist.get_world_size()


class LockstepPoissonSampler(Sampler[list[int]]):
    """Poisson batches of this rank's shard, ``batches`` per epoch, empty ones included."""

    def __init__(
        self,
        n: int,
        q: float,
        batches: int,
        rank: int,
        world: int,
        generator: torch.Generator | None,
    ) -> None:
        if not 0 < q <= 1:
            raise PrivlmError(f"the sampling rate must lie in (0, 1], got {q}")
        self.shard = torch.arange(rank, n, world)
        self.q = q
        self.batches = batches
        # this rank's coins, independent of the other ranks'; None: the OS CSPRNG (secure mode)
        self.generator = generator

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[list[int]]:
        for _ in range(self.batches):
            keep = poisson_coins(len(self.shard), self.q, self.generator)
            yield self.shard[keep].tolist()


def collate_with_empty(example: tuple[torch.Tensor, ...]) -> Any:
    """A collate function that turns an empty batch into zero-length tensors shaped like
    ``example``'s fields, so a rank with no sampled example still takes the step."""

    def collate(batch: list[Any]) -> Any:
        if batch:
            return default_collate(batch)
        return [torch.zeros((0, *t.shape), dtype=t.dtype) for t in example]

    return collate


def replicas_agree(params: list[torch.Tensor]) -> bool:
    """True if every rank holds the same parameters (a checksum, all-gathered)."""
    if not dist.is_initialized():
        return True
    digest = torch.stack([p.detach().double().sum() for p in params]).sum().reshape(1)
    gathered = [torch.zeros_like(digest) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, digest)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
