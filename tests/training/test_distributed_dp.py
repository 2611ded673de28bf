"""DP-SGD under torchrun with Opacus's DPDDP (gloo, 2 processes), and the lockstep Poisson
sampler it relies on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch

from privlm.accounting import PrivacyLedger
from privlm.accounting.ledger import ledger_names
from privlm.randomness import PrivacyRandomness
from privlm.training.distributed_dp import LockstepPoissonSampler, collate_with_empty


def test_the_shards_partition_the_data_and_every_rank_takes_every_step():
    n, q, batches, world = 23, 0.2, 5, 2
    samplers = [
        LockstepPoissonSampler(n, q, batches, r, world, PrivacyRandomness(3).torch_generator())
        for r in range(world)
    ]
    shards = [set(s.shard.tolist()) for s in samplers]
    assert shards[0].isdisjoint(shards[1]) and shards[0] | shards[1] == set(range(n))
    runs = [list(s) for s in samplers]
    assert [len(r) for r in runs] == [batches, batches]


def test_inclusion_is_bernoulli_q_and_empty_batches_are_yielded():
    n, q = 10, 0.1
    s = LockstepPoissonSampler(
        n, q, 4000, rank=1, world=2, generator=PrivacyRandomness().torch_generator()
    )
    batches = list(s)
    counts = torch.zeros(n)
    for b in batches:
        counts[b] += 1
    shard = s.shard
    freq = counts[shard] / len(batches)
    assert torch.allclose(freq, torch.full_like(freq, q), atol=0.02)
    assert counts[[i for i in range(n) if i not in shard.tolist()]].sum() == 0
    empty = sum(1 for b in batches if not b)
    assert empty == pytest.approx(4000 * (1 - q) ** len(shard), rel=0.15)


def test_an_empty_batch_collates_to_zero_length_tensors():
    example = (torch.zeros(7, dtype=torch.long), torch.zeros(7, dtype=torch.bool))
    ids, mask = collate_with_empty(example)([])
    assert ids.shape == (0, 7) and mask.dtype == torch.bool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(tmp_path, device: str = "cpu") -> dict:
    """``privlm train dpsgd`` under torchrun with two processes; its privacy.json."""
    data = tmp_path / "d.txt"
    data.write_text("\n".join(f"line {i} of private notes" for i in range(40)))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "privlm", "train", "dpsgd", str(data), "--out", str(tmp_path / "o"),
        "--model", "tiny", "--epsilon", "4", "--batch-size", "10", "--physical-batch-size", "3",
        "--block-size", "16", "--epochs", "2", "--ledger", str(tmp_path / "l.db"), "--json",
        "--device", device,
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((tmp_path / "o" / "privacy.json").read_text())


def test_dpsgd_under_torchrun_with_two_processes(tmp_path):
    saved = run_torchrun(tmp_path)
    assert saved["processes"] == 2 and saved["device"] == "cpu"
    assert saved["epsilon"] <= 4.0 and saved["steps"] == 8 and saved["sample_rate"] == 0.25
    (name,) = ledger_names(tmp_path / "l.db")  # the data's one ledger
    assert PrivacyLedger(tmp_path / "l.db", name).count() == 1  # rank 0 charged once


def test_gpus_talk_nccl_and_each_rank_takes_its_own_gpu(monkeypatch):
    """Under torchrun, NCCL between GPUs (one per process), gloo between CPUs."""
    import torch

    from privlm.errors import PrivlmError
    from privlm.training.distributed_dp import distributed_backend, rank_device

    assert distributed_backend(torch.device("cuda", 0)) == "nccl"
    assert distributed_backend(torch.device("cpu")) == "gloo"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert rank_device(torch.device("cuda")) == torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(PrivlmError, match="no GPU of its own"):
        rank_device(torch.device("cuda"))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rank_device(torch.device("cuda")) == torch.device("cuda")
