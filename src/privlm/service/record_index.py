"""One budget per body of records, for a tenant's whole history.

A dataset's budget bounds what privlm releases about its records. If a subset of those
records, a copy, or a re-upload after deletion got a fresh budget, the bound would mean
nothing: a tenant could spend ε 8 on each of a hundred subsets. So the service keeps, per
tenant, the digest of every record it ever received in a private dataset, with the budget it
belongs to. It keeps them after the dataset is deleted (a tombstone: the text and file are
gone, the digests and the ledger stay).

- A new private upload that shares a record with one budget **joins** it (one ledger, the
  first dataset's (ε, δ)). One that would join two budgets is refused with the reason.
- A public upload, or a PromptPATE public input, that shares a record with any private
  dataset of the tenant, present or deleted, is refused (the count, never the text).

**Keyed digests.** A record's identity is its text with runs of whitespace made one space
(:func:`privlm.data.records.record_digest`'s normalisation), under HMAC-SHA256 with a key
per tenant. The key is derived from a server secret kept in a file of the data directory
(``record-key``, mode 0600), never in the database, so a leaked database does not let
anyone test guesses of short texts. The database keeps a check value of the secret, and a
service whose file is missing or different refuses to start: it would no longer recognise
the tenant's records.

**Not seen through:** a record edited by one character is another record (docs/service.md,
"What the budget bounds").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from privlm.data.records import Record
from privlm.errors import PrivlmError
from privlm.service.db import Dataset, RecordDigest, ServiceMeta

KEY_FILE = "record-key"
CHECK = "record-key-check"


class RecordKeyError(PrivlmError):
    """The server's record key is missing or not the one the database was written with."""


def _check_value(secret: bytes) -> str:
    return hmac.new(secret, b"privlm record-key check", hashlib.sha256).hexdigest()


def server_secret(session: Session, data_dir: Path) -> bytes:
    """The server's record secret: read from ``data_dir/record-key``, made there (0600) on
    first use, and checked against the database's check value."""
    path = Path(data_dir) / KEY_FILE
    stored = session.get(ServiceMeta, CHECK)
    if not path.is_file():
        if stored is not None:
            raise RecordKeyError(
                f"{path} is missing, but the database has records keyed with it: without it "
                "the service cannot tell which budget an upload's records belong to. Restore "
                "the file from a backup of the data directory"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    secret = path.read_bytes()
    if stored is None:
        session.add(ServiceMeta(key=CHECK, value=_check_value(secret)))
        session.flush()
    elif not hmac.compare_digest(stored.value, _check_value(secret)):
        raise RecordKeyError(
            f"{path} is not the record key this database was written with; restore the "
            "right one (a new key would give every re-uploaded record a fresh budget)"
        )
    return secret


def tenant_key(secret: bytes, tenant_id: str) -> bytes:
    return hmac.new(secret, f"privlm records {tenant_id}".encode(), hashlib.sha256).digest()


def keyed_digests(records: Iterable[Record], key: bytes) -> set[str]:
    """The keyed digest of each record's whitespace-normalised text."""
    return {
        hmac.new(key, " ".join(r.text.split()).encode("utf-8"), hashlib.sha256).hexdigest()
        for r in records
    }


LOOKUP_CHUNK = 2000  # digests per bounded IN list (SQLite allows 32,766 variables)


def known_digests(session: Session, tenant_id: str, digests: set[str]) -> dict[str, str]:
    """The budget of each of ``digests`` the tenant's index already holds."""
    found: dict[str, str] = {}
    items = sorted(digests)
    for i in range(0, len(items), LOOKUP_CHUNK):
        rows = session.execute(
            select(RecordDigest.digest, RecordDigest.budget_id).where(
                RecordDigest.tenant_id == tenant_id,
                RecordDigest.digest.in_(items[i : i + LOOKUP_CHUNK]),
            )
        )
        found.update((d, b) for d, b in rows)
    return found


def budgets_sharing(session: Session, tenant_id: str, digests: set[str]) -> Counter[str]:
    """How many of ``digests`` each of the tenant's budgets already holds."""
    return Counter(known_digests(session, tenant_id, digests).values())


def index_records(
    session: Session,
    tenant_id: str,
    digests: set[str],
    budget_id: str,
    known: Iterable[str] | None = None,
) -> None:
    """Record ``digests`` as the budget's (those already indexed keep their budget;
    ``known``: those, when the caller has looked them up already). One bulk insert."""
    have = set(known_digests(session, tenant_id, digests) if known is None else known)
    rows = [
        {"tenant_id": tenant_id, "digest": d, "budget_id": budget_id}
        for d in sorted(digests)
        if d not in have
    ]
    if rows:
        session.execute(insert(RecordDigest), rows)
    session.flush()


def describe_sharing(session: Session, owners: Counter[str]) -> str:
    """ "ds_a (tickets, 12 records), ds_b (deleted, 3 records)": never a record's text."""
    parts = []
    for budget_id, count in owners.most_common():
        row = session.get(Dataset, budget_id)
        name = "deleted" if row is None or row.deleted_at is not None else row.name
        parts.append(f"{budget_id} ({name}, {count} record{'s' * (count != 1)})")
    return ", ".join(parts)


def backfill(session: Session, secret: bytes, load: Callable[[Dataset], Any]) -> int:
    """Index the records of private datasets stored before the index existed, oldest first,
    each under its own budget (a record already indexed keeps its budget: two ledgers that
    already exist are never merged). ``load(row)`` reads a dataset's records."""
    rows = session.scalars(
        select(Dataset)
        .where(
            Dataset.kind == "private",
            Dataset.records_indexed.is_(False),
            Dataset.deleted_at.is_(None),
        )
        .order_by(Dataset.created_at)
    ).all()
    for row in rows:
        try:
            records = load(row).records
        except PrivlmError:
            continue  # a file gone missing: nothing to index
        index_records(
            session, row.tenant_id, keyed_digests(records, tenant_key(secret, row.tenant_id)),
            row.budget_id or row.id,
        )  # fmt: skip
        row.records_indexed = True
    return len(rows)
