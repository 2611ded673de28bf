"""Ensemble training fanned out over a Ray cluster that the test starts on loopback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from privlm.training import ensemble as ens
from privlm.training.config import EnsembleConfig
from tests.training.test_ensemble import CFG, KEY, users_dataset

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    if not RAY.exists():
        pytest.fail("ray is a declared dependency but its CLI is missing")
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(
        [
            str(RAY),
            "start",
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=180,
    )
    yield f"127.0.0.1:{port}"
    import ray

    ray.shutdown()
    subprocess.run([str(RAY), "stop", "--force"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(temp, ignore_errors=True)


def test_one_ray_task_per_adapter_gives_the_same_ensemble(ray_cluster, tmp_path):
    ds = users_dataset()
    manifest = ens.train_ensemble("tiny", ds, tmp_path / "ray", EnsembleConfig(parts=4, protocol="pmixed", training=CFG), progress=False, ray_address=ray_cluster,
        partition_key=KEY,
    )  # fmt: skip
    assert all(a["status"] == "done" for a in manifest.adapters.values())
    assert len(manifest.adapters) == 4
    assert all(a["ray"] for a in ens.ensemble_statistics(tmp_path / "ray")["adapters"].values())
    local = ens.train_ensemble(
        "tiny",
        ds,
        tmp_path / "local",
        EnsembleConfig(parts=4, protocol="pmixed", training=CFG),
        progress=False,
        partition_key=KEY,
    )
    from safetensors.torch import load_file

    for name in local.adapters:  # same seed, same part: the same adapter, up to the
        # summation order of a 1-thread Ray worker against 2 local threads
        a = load_file(str(tmp_path / "ray" / name / "adapter_model.safetensors"))
        b = load_file(str(tmp_path / "local" / name / "adapter_model.safetensors"))
        assert a.keys() == b.keys()
        assert all(torch.allclose(a[k], b[k], atol=1e-4, rtol=1e-3) for k in a)
    saved = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert saved["partition"] == local.to_dict()["partition"]
