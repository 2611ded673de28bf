"""Dataset uploads: validated by the same loader as the CLI (``privlm.data.load_file``),
stored per tenant, deleted with their data. Error messages name the problem and the line,
never the content."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.accounting import PrivacyLedger
from privlm.config import check_settings, setting
from privlm.data import Dataset as Records
from privlm.data import load_file
from privlm.data.records import content_digest
from privlm.errors import DataError, PrivlmError
from privlm.service.db import Dataset, new_id
from privlm.service.storage import dataset_path
from privlm.service.strict import MAX_BUDGET_EPSILON
from privlm.training.sdp_charges import SDP_NOTE, charge_guarantee

FORMATS = (".txt", ".jsonl", ".csv")
MAX_NAME = 200
# The fields a job reads: the text, a label, a (pseudonymous) user id, and the second text of
# the bundled sentence-pair tasks. Anything else is refused, never stored,
# unless the upload names it in ``fields``: a field its own task's template uses.
USED_FIELDS = ("text", "label", "user_id", "hypothesis")
MAX_EXTRA_FIELDS = 16


class UploadError(PrivlmError):
    """An upload that cannot be stored; the message is safe to return to the client."""


def _suffix(filename: str) -> str:
    suffix = Path(filename).suffix.lower()
    if suffix not in FORMATS:
        raise UploadError(
            f"unsupported file type {suffix or '(none)'!r}; upload one of {', '.join(FORMATS)}"
        )
    return suffix


def parse_fields(fields: str | None) -> tuple[str, ...]:
    """The upload's ``fields``: comma-separated names of template fields to keep."""
    names = tuple(f.strip() for f in (fields or "").split(",") if f.strip())
    bad = [n for n in names if not n.isidentifier() or len(n) > 40]
    if bad:
        raise UploadError(
            "fields: names are plain identifiers (letters, digits, _), comma-separated"
        )
    if len(names) > MAX_EXTRA_FIELDS:
        raise UploadError(f"fields: at most {MAX_EXTRA_FIELDS} extra fields")
    return names


@dataclass(frozen=True)
class DatasetBudget:
    """A dataset's privacy budget, fixed at upload: what every job and deployment on it may
    spend together. The upload form, the API and the page take their defaults from here."""

    epsilon: float = setting(
        8.0, "The dataset's budget ε: every job and deployment on it together (1 to 8 is usual)",
        gt=0, le=MAX_BUDGET_EPSILON,
    )  # fmt: skip
    delta: float = setting(1e-5, "The dataset's budget δ", gt=0, lt=1)

    def __post_init__(self) -> None:
        check_settings(self)


DEFAULT_BUDGET = DatasetBudget()


def check_budget(epsilon: float, delta: float) -> None:
    try:
        DatasetBudget(epsilon, delta)
    except PrivlmError as exc:
        raise UploadError(f"budget_{exc}") from None


def store_dataset(
    session: Session,
    root: Path,
    tenant_id: str,
    filename: str,
    content: bytes,
    budget_epsilon: float,
    budget_delta: float,
    perturbation: dict[str, Any] | None = None,
    name: str | None = None,
    require_dp: bool = False,
    fields: tuple[str, ...] = (),
    public: bool = False,
) -> Dataset:
    """Validate ``content`` as a ``.txt``/``.jsonl``/``.csv`` file and store it; besides
    :data:`USED_FIELDS` it keeps only the ``fields`` named (a task template's)."""
    suffix = _suffix(filename)
    check_budget(budget_epsilon, budget_delta)
    display = (name or Path(filename).name).strip()[:MAX_NAME] or "dataset"
    ds_id = new_id("ds")
    path = dataset_path(root, tenant_id, ds_id, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".upload-{path.name}")
    tmp.write_bytes(content)
    try:
        records = load_file(tmp)
    except DataError as exc:
        tmp.unlink(missing_ok=True)
        where = f"line {exc.line}: " if exc.line else ""
        raise UploadError(f"{display}: {where}{exc.problem}") from None
    unused = sorted({k for r in records.records for k in r.fields} - {*USED_FIELDS, *fields})
    if unused:
        tmp.unlink(missing_ok=True)
        raise UploadError(
            f"{display}: column(s) {', '.join(repr(c) for c in unused[:10])} are used by no job "
            f"and are not stored; upload only {', '.join(USED_FIELDS)} and the fields your "
            "task's template uses, named in 'fields' (the page drops the other columns, and "
            "sends a user id only as a keyed pseudonym)"
        )
    digest = content_digest(records.records)
    try:
        check_not_a_copy(session, tenant_id, digest, public, display)
    except UploadError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    row = Dataset(
        id=ds_id, tenant_id=tenant_id, name=display, format=suffix.lstrip("."),
        records=len(records), bytes=len(content), path=str(path),
        budget_epsilon=budget_epsilon, budget_delta=budget_delta,
        perturbation=None if perturbation is None else json.dumps(perturbation),
        require_dp=require_dp, kind="public" if public else "private",
        content_digest=digest,
    )  # fmt: skip
    session.add(row)
    session.flush()
    return row


def check_not_a_copy(
    session: Session, tenant_id: str, digest: str, public: bool, display: str
) -> None:
    """Refuse a private upload whose records are a private dataset's of the same tenant
    (a second budget for the same data), and a public upload of a private dataset's records
    (its records would then leave verbatim). Records compare by text, whatever the bytes."""
    twin = session.scalar(
        select(Dataset).where(
            Dataset.tenant_id == tenant_id,
            Dataset.content_digest == digest,
            Dataset.kind == "private",
        )
    )
    if twin is None:
        return
    if public:
        raise UploadError(
            f"{display}: these are the records of private dataset {twin.id} ({twin.name}); "
            "private data cannot be declared public"
        )
    raise UploadError(
        f"{display}: these are the records of dataset {twin.id} ({twin.name}), already "
        "uploaded with its own budget; a second copy would get a second budget for the same "
        f"data. Use {twin.id}"
    )


def load_records(row: Dataset) -> Records:
    return load_file(row.path)


def delete_dataset(session: Session, row: Dataset) -> None:
    """Remove the file and the row. (Its privacy ledger stays: spent budget is history.)"""
    Path(row.path).unlink(missing_ok=True)
    session.delete(row)


def budget_state(ledger: PrivacyLedger) -> dict[str, Any]:
    """What the dataset's ledger has spent and reserved, and what is left.
    JFT's charges (selective DP, no DP bound) are summed apart from DP spending."""
    spent = ledger.spent()
    sdp = ledger.spent_by(lambda r: charge_guarantee(r.mechanism) == "SDP")
    dp = ledger.spent_by(lambda r: charge_guarantee(r.mechanism) == "DP")
    return {
        "spent": {"epsilon": spent.epsilon, "delta": spent.delta},
        "spent_by_guarantee": {
            "DP": {"epsilon": dp.epsilon},
            "SDP": {"epsilon": sdp.epsilon, "note": SDP_NOTE},
        },
        "remaining": {"epsilon": max(ledger.budget.epsilon - spent.epsilon, 0.0)},
        "overdrawn": ledger.overdrawn(),
        "charges": [
            {"mechanism": c.mechanism, "guarantee": charge_guarantee(c.mechanism),
             "at": c.created_at,
             **{k: c.params[k] for k in ("deployment", "job") if k in c.params}}
            for c in ledger.charges()
        ],
        "rule": "every DP job, every JFT job and every deployment of its ensembles is charged "
        "to this budget; a deployment reserves its whole (ε, δ) when it is created. The total "
        "composes all of them, so it can be below the sum of the DP and SDP parts",
    }  # fmt: skip


def describe(row: Dataset, ledger: PrivacyLedger | None = None) -> dict[str, Any]:
    budget: dict[str, Any] | None = {"epsilon": row.budget_epsilon, "delta": row.budget_delta}
    if row.kind == "public":
        budget = None
    elif ledger is not None and budget is not None:
        budget.update(budget_state(ledger))
    return {
        "id": row.id,
        "name": row.name,
        "kind": row.kind,
        "format": row.format,
        "records": row.records,
        "bytes": row.bytes,
        "budget": budget,
        "perturbation": None if row.perturbation is None else json.loads(row.perturbation),
        "require_dp": bool(row.require_dp),
        "created_at": row.created_at.isoformat() + "Z",
    }
