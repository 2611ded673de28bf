"""Ensemble training for private prediction (PMixED Phase I; SubMix Algorithm 1).

- ``pmixed``: the corpus is split by privacy unit into N disjoint parts, one adapter each.
- ``submix``: k parts, each split in two halves by unit, one adapter per half.

Parts are assigned by a keyed hash of each unit's identity (``privlm.data.partition``), so
removing one unit changes one part only, the assumption of both analyses. A part that
receives no unit gets the untrained adapter (LoRA's B starts at zero): its member is the
public model, still a function of its own (empty) part.

The output directory holds one PEFT adapter per (sub)part and ``manifest.json``: model,
protocol, N, seed, the partition key, privacy unit, the number of units (public by
declaration, ``privlm.curator.PUBLIC_SIZE``) and training config. The adapters stay private,
yet the rest of the directory is the same for neighbouring datasets: exact statistics of the
data (records, each part's size, which parts are empty, token usage, losses, time) and a
digest of the set of units go to the curator's report beside it (``<out>.curator.json``),
never into the manifest (docs/sharp_edges.md, "What leaves with an artefact"). A run that is
interrupted resumes from the adapters already finished, with the key recorded in the
manifest; a resume with different settings or data is refused rather than mixing two
ensembles.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from privlm.curator import PUBLIC_SIZE, curator_report_path, read_statistics, record_statistics
from privlm.data import Dataset
from privlm.data.partition import derive_key, new_partition_key, partition_by_unit
from privlm.errors import PrivlmError
from privlm.fsutil import write_json_atomically
from privlm.models import ModelSource, reference_of
from privlm.progress import progress_bar
from privlm.training.config import PROTOCOLS
from privlm.training.config import EnsembleConfig as EnsembleConfig
from privlm.training.in_context_members import write_member_prompts
from privlm.training.lora_finetune import finetune_lora, save_untrained_adapter
from privlm.training.manifest import FORMAT as FORMAT
from privlm.training.manifest import MANIFEST as MANIFEST
from privlm.training.manifest import PROMPTS, EnsembleManifest, read_manifest_dict
from privlm.training.manifest import load_manifest as load_manifest
from privlm.training.model_card import ensemble_card


def _units_fingerprint(dataset: Dataset) -> str:
    """A digest of the set of units, so that a resume on other data is refused; it is a
    function of the private data, so it lives in the curator's report only."""
    h = hashlib.sha256()
    for u in sorted(dataset.units()):
        h.update(u.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


# what older privlm versions kept in the manifest, now in the curator's report
_LEGACY_STATISTICS = ("records", "units_fingerprint")


def _migrate_legacy(out: Path, old: dict[str, Any]) -> dict[str, Any]:
    """Move the data statistics an older manifest held into the curator's report."""
    moved = {k: old.pop(k) for k in _LEGACY_STATISTICS if k in old}
    if not moved:
        return old
    sizes = [dict(p) for p in old["partition"]]
    old["partition"] = [{"name": p["name"]} for p in sizes]
    adapters = {n: {k: v for k, v in a.items() if k not in ("status", "path")}
                for n, a in old["adapters"].items()}  # fmt: skip
    old["adapters"] = {n: {"status": a["status"], "path": a["path"]}
                       for n, a in old["adapters"].items()}  # fmt: skip
    old.setdefault("data_size", PUBLIC_SIZE)
    record_statistics(out, {**moved, "partition": sizes, "adapters": adapters})
    write_json_atomically(out / MANIFEST, old)
    return old


def _resume(
    out: Path, raw: dict[str, Any], identity: dict[str, Any], data_identity: dict[str, Any]
) -> EnsembleManifest:
    """The manifest ``raw`` of the ensemble being resumed in ``out``, if it was started with
    the same settings (its manifest) and the same data (the curator's report); else refuse."""
    old = _migrate_legacy(out, raw)
    known = read_statistics(out)
    if not known:
        raise PrivlmError(
            f"{out}: the curator's report {curator_report_path(out).name} beside it is "
            "missing, so privlm cannot check that the data is the same; use another output "
            "directory"
        )
    changed = [k for k, v in identity.items() if old.get(k) != v]
    changed += [k for k, v in data_identity.items() if known.get(k) != v]
    if changed:
        raise PrivlmError(
            f"{out}: holds an ensemble trained with other settings or data ({', '.join(changed)}); "
            "use another output directory"
        )
    return EnsembleManifest.from_dict(old)


def ensemble_statistics(out_dir: str | Path) -> dict[str, Any]:
    """The curator's statistics of an ensemble: records, each part's size, and each
    adapter's training statistics (token usage, seconds, an empty part). Not private."""
    return read_statistics(out_dir)


def plan_parts(
    dataset: Dataset, n_parts: int, protocol: str, key: str
) -> list[tuple[str, Dataset]]:
    """The (name, data) of every adapter to train; SubMix's halves use a derived key."""
    if protocol not in PROTOCOLS:
        raise PrivlmError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    parts = partition_by_unit(dataset, n_parts, key)
    if protocol == "pmixed":
        return [(f"part-{i:03d}", p) for i, p in enumerate(parts)]
    out = []
    for i, p in enumerate(parts):
        halves = partition_by_unit(  # a half may be empty: its member is the public model
            p, 2, derive_key(key, f"submix-halves-{i}"), fewer_units_ok=True
        )
        out += [(f"part-{i:03d}-a", halves[0]), (f"part-{i:03d}-b", halves[1])]
    return out


def _write_in_context(
    model: ModelSource,
    planned: list[tuple[str, Dataset]],
    limit: int,
    out: Path,
    manifest: EnsembleManifest,
) -> EnsembleManifest:
    """In-context members: each part's prompt written, no training (a resume rewrites the
    same prompts)."""
    stats = write_member_prompts(model, planned, limit, out)
    record_statistics(out, {"adapters": stats})
    manifest.adapters = {n: {"status": "done", "path": PROMPTS} for n, _ in planned}
    manifest.write(out)
    (out / "README.md").write_text(ensemble_card(manifest.to_dict()))
    return manifest


def _partition_key(out: Path, raw: dict[str, Any] | None, given: str | None) -> str:
    """The key of the ensemble being resumed (its manifest ``raw``), the one given, or a
    fresh random one."""
    if raw is not None:
        old = raw.get("partition_key")
        if old is None:
            raise PrivlmError(
                f"{out}: holds an ensemble from an older privlm (no partition key); use "
                "another output directory"
            )
        if given is not None and given != old:
            raise PrivlmError(
                f"{out}: holds an ensemble partitioned with another key; use another output "
                "directory"
            )
        return str(old)
    return given if given is not None else new_partition_key()


def train_ensemble(
    model: ModelSource,
    dataset: Dataset,
    out_dir: str | Path,
    config: EnsembleConfig | None = None,
    *,
    progress: bool = True,
    ray_address: str | None = None,
    partition_key: str | None = None,
) -> EnsembleManifest:
    """Train (or resume) an ensemble of adapters of ``model`` (a name, or a loaded model, which
    each adapter's training copies and leaves unchanged); returns its manifest. With
    ``config.members == "in-context"`` nothing is trained: each part's records become its
    member's prompt (:mod:`privlm.training.in_context_members`). With
    ``ray_address``, one Ray task per adapter ('local' starts a Ray instance in this
    process), which loads the model itself, so it needs a name. ``partition_key``
    (hex) fixes the partition; by default a fresh random key is drawn and recorded.

    Training an ensemble charges no ledger: nothing private leaves it. Its tokens are
    charged one by one when a PMixED or SubMix predictor releases them
    (:func:`privlm.predict.factory.build_predictor`)."""
    config = config or EnsembleConfig()
    cfg = config.training
    reference = reference_of(model)
    if ray_address is not None and not isinstance(model, str):
        raise PrivlmError(
            "Ray workers load the model themselves: pass its name or directory "
            f"({reference!r}) rather than a loaded model"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    raw = read_manifest_dict(out)  # read once: the key, then the resume, come from it
    key = _partition_key(out, raw, partition_key)
    planned = plan_parts(dataset, config.parts, config.protocol, key)
    in_context = config.members == "in-context"
    fresh = EnsembleManifest(
        model=reference,
        protocol=config.protocol,
        n_parts=config.parts,
        partition_key=key,
        privacy_unit=dataset.unit_kind,
        units=len(dataset.units()),
        # checkpointing changes memory, not the adapters: a run may resume with it turned on
        training={}
        if in_context
        else {k: v for k, v in cfg.to_dict().items() if k != "gradient_checkpointing"},
        member_kind=config.members,
        prompt_tokens=config.prompt_tokens if in_context else None,
        partition=[n for n, _ in planned],
        seed=cfg.seed,
        data_size=PUBLIC_SIZE,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    data_identity = {"records": len(dataset), "units_fingerprint": _units_fingerprint(dataset)}
    if raw is not None:
        manifest = _resume(out, raw, fresh.identity(), data_identity)
    else:
        manifest = fresh
        sizes = [{"name": n, "records": len(d), "units": len(d.units())} for n, d in planned]
        record_statistics(out, {**data_identity, "partition": sizes, "adapters": {}})
        manifest.write(out)
    if in_context:
        return _write_in_context(model, planned, config.prompt_tokens, out, manifest)
    todo = [(n, d) for n, d in planned if n in manifest.missing()]
    bar = progress_bar(
        total=len(planned),
        initial=len(planned) - len(todo),
        desc=f"{config.protocol} ensemble",
        unit="adapter",
        disable=not progress,
    )

    def record(name: str, stats: dict[str, Any]) -> None:
        adapters = read_statistics(out).get("adapters", {})
        record_statistics(out, {"adapters": {**adapters, name: stats}})
        manifest.adapters[name] = {"status": "done", "path": name}
        manifest.targets = stats["targets"]
        (out / name / "README.md").write_text(ensemble_card(manifest.to_dict(), member=name))
        manifest.write(out)
        bar.update(1)

    for name in [n for n, d in todo if not d.records]:
        record(name, save_untrained_adapter(model, cfg, out / name))
    todo = [(n, d) for n, d in todo if d.records]
    if ray_address is not None and todo:
        from privlm.training.distributed import train_on_ray

        jobs = [(name, data.texts(), out / name) for name, data in todo]
        for name, stats in train_on_ray(ray_address, reference, jobs, cfg):
            record(name, {**stats, "ray": True})
    else:
        for name, data in todo:
            stats = finetune_lora(
                model, data.texts(), cfg, out / name, desc=name, progress=progress
            )
            record(name, stats)
    bar.close()
    (out / "README.md").write_text(ensemble_card(manifest.to_dict()))
    return manifest
