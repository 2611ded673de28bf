"""An ensemble's manifest (``manifest.json``), typed, read and written here only.

It holds what may leave with the ensemble: the settings, the partition key and rule, the
privacy unit and the number of units (public by declaration, ``privlm.curator.PUBLIC_SIZE``),
and which adapters are done. Exact statistics of the data (part sizes, token usage, losses)
never enter it: they are in the curator's report beside it (docs/sharp_edges.md, "What leaves
with an artefact"). This module imports no torch, so the prediction layer, the service and
the CLI read manifests without loading the training code.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from privlm.errors import PrivlmError
from privlm.fsutil import write_json_atomically

MANIFEST = "manifest.json"
PROMPTS = "member-prompts.json"
FORMAT = "privlm-ensemble/1"


@dataclass
class EnsembleManifest:
    """``manifest.json`` of a PMixED or SubMix ensemble (``privlm.training.ensemble``)."""

    model: str
    protocol: str
    n_parts: int
    partition_key: str
    privacy_unit: str
    units: int
    training: dict[str, Any]
    partition: list[str]  # every member's name, in the order the engine stacks them
    seed: int | None = 0
    partition_rule: str = "HMAC-SHA256(key, unit identity) mod parts (privlm.data.partition)"
    format: str = FORMAT
    data_size: str = ""
    created_at: str = ""
    adapters: dict[str, dict[str, str]] = field(default_factory=dict)  # name → status, path
    targets: list[str] | None = None
    member_kind: str = "lora"  # or "in-context": prompts in PROMPTS, no adapters
    prompt_tokens: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EnsembleManifest:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in raw.items() if k in known}
        values["partition"] = [p["name"] if isinstance(p, dict) else p for p in raw["partition"]]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``partition`` as ``[{"name": …}]``, as privlm has always written)."""
        out = asdict(self)
        out["partition"] = [{"name": n} for n in self.partition]
        for optional in ("targets", "prompt_tokens"):
            if out[optional] is None:
                out.pop(optional)
        return out

    def identity(self) -> dict[str, Any]:
        """The settings a resume must match."""
        keys = ("format", "model", "protocol", "n_parts", "seed", "partition_key",
                "partition_rule", "privacy_unit", "units", "training", "member_kind",
                "prompt_tokens")  # fmt: skip
        return {k: getattr(self, k) for k in keys}

    def missing(self) -> list[str]:
        """Members not yet trained."""
        return [n for n in self.partition if self.adapters.get(n, {}).get("status") != "done"]

    def prompts_path(self, root: str | Path) -> Path:
        """In-context members' prompts (private, as adapters are): one token list each."""
        return Path(root) / PROMPTS

    def member_dirs(self, root: str | Path) -> list[Path]:
        """Every member's adapter directory, in engine order."""
        return [Path(root) / n for n in self.partition]

    @property
    def members(self) -> int:
        return len(self.partition)

    @property
    def submix_parts(self) -> int:
        """SubMix's k (two adapters per part)."""
        return len(self.partition) // 2

    def write(self, root: str | Path) -> None:
        write_json_atomically(Path(root) / MANIFEST, self.to_dict())


def read_manifest_dict(root: str | Path) -> dict[str, Any] | None:
    """The raw manifest in ``root``, or None when there is none (training's resume path,
    which migrates older formats before typing them)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    raw: dict[str, Any] = json.loads(path.read_text())
    return raw


def load_manifest(root: str | Path) -> EnsembleManifest:
    """The manifest of a complete ensemble in ``root``; refuses a missing or partial one."""
    raw = read_manifest_dict(root)
    if raw is None:
        raise PrivlmError(
            f"{root}: no {MANIFEST}; train an ensemble there first (privlm ensemble train)"
        )
    manifest = EnsembleManifest.from_dict(raw)
    missing = manifest.missing()
    if missing:
        raise PrivlmError(
            f"{root}: the ensemble is incomplete ({len(missing)} adapters missing); rerun the "
            "same `privlm ensemble train` command to resume"
        )
    return manifest
