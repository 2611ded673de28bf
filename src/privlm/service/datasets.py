"""Dataset uploads: validated by the same loader as the CLI (``privlm.data.load_file``),
stored per tenant, deleted with their data. Error messages name the problem and the line,
never the content."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.accounting import PrivacyLedger
from privlm.config import check_settings, setting
from privlm.data import Dataset as Records
from privlm.data import load_file
from privlm.data.sketch import Sketcher
from privlm.errors import DataError, PrivlmError
from privlm.service.db import Dataset, new_id, now
from privlm.service.record_index import (
    Matches,
    RecordPrint,
    describe_lines,
    describe_sharing,
    find_matches,
    fingerprint,
    index_records,
    split_units,
    tenant_key,
)
from privlm.service.storage import dataset_path
from privlm.service.strict import MAX_BUDGET_EPSILON
from privlm.training.sdp_charges import SDP_NOTE, charge_guarantee

FORMATS = (".txt", ".jsonl", ".csv")
UPLOAD_PREFIX = ".upload-"  # an upload being checked; removed if refused, swept at start
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


MIN_BUDGET_EPSILON = 0.01  # below this a budget admits no useful job; a typo, most likely


@dataclass(frozen=True)
class DatasetBudget:
    """A dataset's privacy budget, fixed at upload: what every job and deployment on it may
    spend together. The upload form, the API and the page take their defaults from here."""

    epsilon: float = setting(
        8.0, "The dataset's budget ε: every job and deployment on it together (1 to 8 is usual)",
        ge=MIN_BUDGET_EPSILON, le=MAX_BUDGET_EPSILON,
    )  # fmt: skip
    delta: float = setting(1e-5, "The dataset's budget δ", gt=0, lt=1)

    def __post_init__(self) -> None:
        check_settings(self)


DEFAULT_BUDGET = DatasetBudget()


def check_budget(epsilon: float, delta: float) -> DatasetBudget:
    try:
        return DatasetBudget(epsilon, delta)
    except PrivlmError as exc:
        raise UploadError(f"budget_{exc}") from None


@dataclass(frozen=True)
class Stored:
    """An upload as stored: its row; the dataset whose budget it joined (None: a budget of
    its own) and how many of its records that one already held."""

    row: Dataset
    joined: Dataset | None = None
    shared: int = 0
    near: int = 0  # of ``shared``, how many are near copies (not exact ones)
    where: str = ""  # the upload's own lines that matched, e.g. "lines 3, 7"


@dataclass(frozen=True)
class PreparedUpload:
    """An upload written, parsed and digested off the event loop, outside any database
    transaction (:func:`prepare_upload`): what :func:`commit_upload` stores, in a short
    transaction of its own."""

    tmp: Path
    path: Path
    tenant_id: str
    ds_id: str
    suffix: str
    display: str
    records: int
    size: int
    prints: list[RecordPrint]
    unit_kind: str  # "record" or "user"

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def prepare_upload(
    root: Path,
    tenant_id: str,
    filename: str,
    content: bytes | BinaryIO,
    secret: bytes,
    name: str | None = None,
    fields: tuple[str, ...] = (),
) -> PreparedUpload:
    """Write ``content`` (bytes, or a file object copied in chunks) beside its final place,
    validate it as a ``.txt``/``.jsonl``/``.csv`` file (besides :data:`USED_FIELDS` only the
    ``fields`` named) and digest its records. No database is touched; nothing of a refused
    upload stays on disk."""
    suffix = _suffix(filename)
    display = (name or Path(filename).name).strip()[:MAX_NAME] or "dataset"
    ds_id = new_id("ds")
    path = dataset_path(root, tenant_id, ds_id, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{UPLOAD_PREFIX}{path.name}")
    try:
        with tmp.open("wb") as out:
            if isinstance(content, bytes):
                out.write(content)
            else:
                shutil.copyfileobj(content, out, 1 << 20)
        records = _validated(tmp, display, fields)
        key = tenant_key(secret, tenant_id)
        prints = fingerprint(records.records, key, ds_id, Sketcher(key))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return PreparedUpload(
        tmp, path, tenant_id, ds_id, suffix, display, len(records), tmp.stat().st_size,
        prints, records.unit_kind,
    )  # fmt: skip


def commit_upload(
    session: Session,
    prepared: PreparedUpload,
    budget: DatasetBudget | None,
    perturbation: dict[str, Any] | None = None,
    require_dp: bool = False,
    public: bool = False,
) -> Stored:
    """Store a prepared upload: a private upload that shares a record with one of the
    tenant's budgets joins it (``budget`` then does not apply). The lookup and the insert
    are one transaction (two uploads of the same records cannot both found a budget). The
    caller commits, then moves the file into place (:func:`place_upload`); a failure here
    removes it."""
    p = prepared
    tenant_id = p.tenant_id
    try:
        matches = find_matches(session, tenant_id, p.prints)
        joined = _budget_owner(session, matches, public, p)
        if joined is not None:
            _check_one_unit(session, joined, matches, p)
        given = budget or DEFAULT_BUDGET
        epsilon, delta = (
            (joined.budget_epsilon, joined.budget_delta) if joined else (given.epsilon, given.delta)
        )
        row = Dataset(
            id=p.ds_id, tenant_id=tenant_id, name=p.display, format=p.suffix.lstrip("."),
            records=p.records, bytes=p.size, path=str(p.path),
            budget_epsilon=epsilon, budget_delta=delta,
            perturbation=None if perturbation is None else json.dumps(perturbation),
            require_dp=require_dp, kind="public" if public else "private",
            budget_id=None if public else (joined.budget_id or joined.id) if joined else p.ds_id,
            unit_kind=p.unit_kind, records_indexed=not public,
        )  # fmt: skip
        session.add(row)
        session.flush()
        if not public:
            index_records(session, tenant_id, p.prints, row.budget_id or p.ds_id, matches.known)
    except BaseException:
        p.discard()
        raise
    shared = matches.records()
    return Stored(
        row, joined, len(shared), matches.near_count(),
        describe_lines(p.prints, shared) if shared else "",
    )  # fmt: skip


def place_upload(prepared: PreparedUpload) -> None:
    """Move a committed upload's file into place (after its row is committed: a refused or
    failed commit leaves only the ``.upload-`` file, which is removed or swept)."""
    os.replace(prepared.tmp, prepared.path)


def store_release(session: Session, root: Path, tenant_id: str, source: Path, name: str) -> Dataset:
    """A DP release (a synth job's texts) saved as a public dataset of the tenant: no
    budget, usable by any job as public data.

    Unlike a public upload, it is **not** checked against the tenant's private records:
    it is a DP output, so anything computed from it is post-processing, whereas a refusal
    that depended on whether a synthetic text equals a private record would itself
    reveal that record (docs/sharp_edges.md, "DP synthetic text")."""
    ds_id = new_id("ds")
    path = dataset_path(root, tenant_id, ds_id, source.suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{UPLOAD_PREFIX}{path.name}")
    shutil.copyfile(source, tmp)
    try:
        records = load_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    display = name.strip()[:MAX_NAME] or "synthetic"
    row = Dataset(
        id=ds_id, tenant_id=tenant_id, name=display, format=source.suffix.lstrip("."),
        records=len(records), bytes=path.stat().st_size, path=str(path),
        budget_epsilon=DEFAULT_BUDGET.epsilon, budget_delta=DEFAULT_BUDGET.delta,
        perturbation=None, require_dp=False, kind="public", budget_id=None,
        records_indexed=False,
    )  # fmt: skip
    session.add(row)
    session.flush()
    return row


def _validated(tmp: Path, display: str, fields: tuple[str, ...]) -> Records:
    """The upload's records, read by the CLI's loader; only the fields a job reads."""
    try:
        records = load_file(tmp)
    except DataError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        raise UploadError(f"{display}: {where}{exc.problem}") from None
    unused = sorted({k for r in records.records for k in r.fields} - {*USED_FIELDS, *fields})
    if unused:
        raise UploadError(
            f"{display}: column(s) {', '.join(repr(c) for c in unused[:10])} are used by no job "
            f"and are not stored; upload only {', '.join(USED_FIELDS)} and the fields your "
            "task's template uses, named in 'fields' (the page drops the other columns, and "
            "sends a user id only as a keyed pseudonym)"
        )
    return records


def _budget_owner(
    session: Session, matches: Matches, public: bool, p: PreparedUpload
) -> Dataset | None:
    """The dataset whose budget a private upload joins (None: a new budget); refuses a
    public upload of private records, and an upload that would join two budgets."""
    owners = matches.owners()
    if not owners:
        return None
    shared = matches.records()
    near = matches.near_count()
    how = f" ({near} of them near copies)" if near else ""
    where = describe_lines(p.prints, shared)
    if public:
        raise UploadError(
            f"{p.display}: {len(shared)} of its {p.records} records{how} are records of the "
            f"tenant's private data ({describe_sharing(session, owners)}): {where}. Private "
            "records cannot be declared public, even after their dataset was deleted"
        )
    if len(owners) > 1:
        raise UploadError(
            f"{p.display}: its records are shared with {len(owners)} different budgets "
            f"({describe_sharing(session, owners)}; {where}). One body of records has one "
            "budget, and this upload would join two; upload the records of each separately"
        )
    owner = session.get(Dataset, next(iter(owners)))
    if owner is None:
        raise UploadError(f"{p.display}: the budget its records belong to is missing")
    return owner


def _check_one_unit(session: Session, joined: Dataset, matches: Matches, p: PreparedUpload) -> None:
    """Refuse an upload that would charge a per-user budget per some finer unit: a
    record-level upload, or one that spreads a user of the budget over several of its own
    units (docs/sharp_edges.md, "One unit per body of records")."""
    founder = session.get(Dataset, joined.budget_id or joined.id)
    declared = founder.unit_kind if founder is not None else None
    budget = joined.budget_id or joined.id
    if declared == "user" and p.unit_kind != "user":
        raise UploadError(
            f"{p.display}: it shares records with dataset {budget}, whose budget protects "
            "one user, but it has no user id column, so each of its records would be a unit "
            "of its own and a user with several records would pay group privacy over them. "
            "Upload it with the same user_id column as the first dataset"
        )
    split = split_units(p.prints, matches) if declared == "user" else []
    if split:
        raise UploadError(
            f"{p.display}: {describe_lines(p.prints, split)} hold records that one privacy "
            f"unit of dataset {budget}'s budget holds, spread over more than one user id "
            "here: a charge per user of this upload would not bound what it releases about "
            "that unit. Give each of those records the user id it has in the first dataset"
        )


def load_records(row: Dataset) -> Records:
    if row.deleted_at is not None:
        raise PrivlmError(f"dataset {row.id} was deleted")
    return load_file(row.path)


def delete_dataset(session: Session, row: Dataset) -> None:
    """A tombstone: the file and its text are removed; the row (for its budget id), the
    ledger and the record digests stay, so spent budget is history an upload cannot undo."""
    Path(row.path).unlink(missing_ok=True)
    row.path, row.deleted_at = "", now()
    session.flush()


def sweep_uploads(root: Path, session: Session) -> tuple[int, int]:
    """The leftovers of uploads a crash interrupted (``.upload-*`` files): one whose row was
    committed (the crash fell between the commit and :func:`place_upload`) is moved into
    place, as the upload would have; any other is removed. Returns (placed, removed)."""
    placed = removed = 0
    for leftover in Path(root).glob(f"tenants/*/datasets/{UPLOAD_PREFIX}*"):
        final = leftover.with_name(leftover.name[len(UPLOAD_PREFIX) :])
        committed = session.scalar(select(Dataset.id).where(Dataset.path == str(final)))
        if committed is not None and not final.exists():
            os.replace(leftover, final)
            placed += 1
        else:
            leftover.unlink(missing_ok=True)
            removed += 1
    return placed, removed


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
        "relation": ledger.to_json()["relation"],
        "per_part": per_part_state(ledger),
    }  # fmt: skip


def per_part_state(ledger: PrivacyLedger) -> dict[str, Any] | None:
    """SubMix deployments' reservations, per part (a part removed), kept beside the per-unit
    figure and never composed with it: while one exists, no per-unit bound covers what it
    releases (docs/sharp_edges.md). None when the dataset has none."""
    from privlm.accounting import Relation
    from privlm.errors import AccountingError

    try:
        beside = ledger.sibling(f"{ledger.name}/per-{Relation.PART.value}")
    except AccountingError:
        return None
    return {
        "spent": {"epsilon": beside.spent().epsilon},
        "relation": Relation.PART.describe(),
        "deployments": [c.params.get("deployment") for c in beside.charges()],
        "note": "SubMix's operational privacy per part: no per-unit bound covers what these "
        "deployments release",
        "ledger": beside.name,
    }


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
        # the dataset whose budget this one shares (they share records), else absent
        **({"budget_of": row.budget_id} if row.budget_id not in (None, row.id) else {}),
        "perturbation": None if row.perturbation is None else json.loads(row.perturbation),
        "require_dp": bool(row.require_dp),
        "created_at": row.created_at.isoformat() + "Z",
    }
