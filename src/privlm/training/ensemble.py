"""Ensemble training for private prediction (PMixED Phase I; SubMix Algorithm 1).

- ``pmixed``: the corpus is split by privacy unit into N disjoint parts, one adapter each.
- ``submix``: k parts, each split in two halves by unit, one adapter per half.

The output directory holds one PEFT adapter per (sub)part and ``manifest.json``: model,
protocol, N, seed, partition sizes, privacy unit, training config. Never private text, and no
hash of it. A run that is interrupted resumes from the adapters already finished; a resume
with different settings or data is refused rather than mixing two ensembles.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from privlm.data import Dataset, partition_by_unit
from privlm.errors import PrivlmError
from privlm.progress import progress_bar
from privlm.training.lora_finetune import LoraTrainingConfig, finetune_lora

MANIFEST = "manifest.json"
FORMAT = "privlm-ensemble/1"
PROTOCOLS = ("pmixed", "submix")


def _units_fingerprint(dataset: Dataset) -> str:
    h = hashlib.sha256()
    for u in sorted(dataset.units()):
        h.update(u.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def plan_parts(
    dataset: Dataset, n_parts: int, protocol: str, seed: int
) -> list[tuple[str, Dataset]]:
    """The (name, data) of every adapter to train."""
    if protocol not in PROTOCOLS:
        raise PrivlmError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    parts = partition_by_unit(dataset, n_parts, seed)
    if protocol == "pmixed":
        return [(f"part-{i:03d}", p) for i, p in enumerate(parts)]
    out = []
    for i, p in enumerate(parts):
        halves = partition_by_unit(p, 2, seed + 1 + i)
        out += [(f"part-{i:03d}-a", halves[0]), (f"part-{i:03d}-b", halves[1])]
    return out


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def train_ensemble(
    model_name: str,
    dataset: Dataset,
    n_parts: int,
    out_dir: str | Path,
    protocol: str = "pmixed",
    config: LoraTrainingConfig | None = None,
    progress: bool = True,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Train (or resume) an ensemble; returns the manifest. With ``ray_address``, one Ray
    task per adapter ('local' starts a Ray instance in this process)."""
    cfg = config or LoraTrainingConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    planned = plan_parts(dataset, n_parts, protocol, cfg.seed)
    identity = {
        "format": FORMAT,
        "model": model_name,
        "protocol": protocol,
        "n_parts": n_parts,
        "seed": cfg.seed,
        "privacy_unit": dataset.unit_kind,
        "records": len(dataset),
        "units": len(dataset.units()),
        "units_fingerprint": _units_fingerprint(dataset),
        "training": cfg.to_dict(),
    }
    manifest_path = out / MANIFEST
    if manifest_path.is_file():
        old = json.loads(manifest_path.read_text())
        changed = [k for k, v in identity.items() if old.get(k) != v]
        if changed:
            raise PrivlmError(
                f"{out}: holds an ensemble trained with other settings or data ({', '.join(changed)}); "
                "use another output directory"
            )
        manifest = old
    else:
        manifest = {
            **identity,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "partition": [
                {"name": n, "records": len(d), "units": len(d.units())} for n, d in planned
            ],
            "adapters": {},
        }
        _write_json(manifest_path, manifest)
    todo = [(n, d) for n, d in planned if manifest["adapters"].get(n, {}).get("status") != "done"]
    bar = progress_bar(
        total=len(planned),
        initial=len(planned) - len(todo),
        desc=f"{protocol} ensemble",
        unit="adapter",
        disable=not progress,
    )

    def record(name: str, stats: dict[str, Any]) -> None:
        manifest["adapters"][name] = {"status": "done", "path": name, **stats}
        manifest["targets"] = stats["targets"]
        _write_json(manifest_path, manifest)
        bar.update(1)

    if ray_address is not None and todo:
        from privlm.training.distributed import train_on_ray

        jobs = [(name, data.texts(), out / name) for name, data in todo]
        for name, stats in train_on_ray(ray_address, model_name, jobs, cfg):
            record(name, {**stats, "ray": True})
    else:
        for name, data in todo:
            stats = finetune_lora(
                model_name, data.texts(), cfg, out / name, desc=name, progress=progress
            )
            record(name, stats)
    bar.close()
    return manifest


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise PrivlmError(
            f"{out_dir}: no {MANIFEST}; train an ensemble there first (privlm ensemble train)"
        )
    manifest: dict[str, Any] = json.loads(path.read_text())
    missing = [
        p["name"]
        for p in manifest["partition"]
        if manifest["adapters"].get(p["name"], {}).get("status") != "done"
    ]
    if missing:
        raise PrivlmError(
            f"{out_dir}: the ensemble is incomplete ({len(missing)} adapters missing); rerun the same `privlm ensemble train` command to resume"
        )
    return manifest
