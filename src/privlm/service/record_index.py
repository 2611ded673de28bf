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
  dataset of the tenant, present or deleted, is refused (the caller's own lines that
  matched, never a stored text).

**What is a record's identity.** Every text-bearing field of a record (its text, a second
text, a template field; never its label or user id), each in canonical form
(:func:`privlm.data.canonical.canonical_text`: HTML entities, NFKC, format characters,
quotes, case, whitespace, punctuation at the ends), under HMAC-SHA256 with a key per
tenant: a copy under another column or in another encoding is the same record. A field of
24 or more canonical characters also has a near-copy sketch (privlm.data.sketch): a copy
with a character changed, a prefix added, or split or merged, is recognised with high
probability.

**One declared unit.** The dataset that founds a budget declares its unit (record or user).
The index keeps each text's unit (a user id as one id space, keyed). A record-level upload
cannot join a per-user budget, and a per-user upload that spreads one user of the budget
over several of its own units is refused: a charge per unit of it would not bound what it
releases about that user (docs/sharp_edges.md, "One unit per body of records").

**Keyed digests.** The key per tenant is derived from a server secret kept in a file of
the data directory (``record-key``, mode 0600), never in the database, so a leaked database does not let
anyone test guesses of short texts. The database keeps a check value of the secret, and a
service whose file is missing or different refuses to start: it would no longer recognise
the tenant's records.

**Not seen through:** a paraphrase, a translation, a text rewritten beyond what the sketch
measures (docs/sharp_edges.md, "What the record index recognises").
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from privlm.data.canonical import canonical_text
from privlm.data.records import Record
from privlm.data.sketch import NEAR_CONTAINMENT, Sketch, Sketcher, containment
from privlm.errors import PrivlmError
from privlm.service.db import Dataset, RecordDigest, ServiceMeta, SketchBand

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


INDEX_VERSION = "canonical-1"  # canonical texts of every field, units, near-copy sketches
VERSION_KEY = "record-index"
SHARED_UNIT = "*"  # a text that several privacy units of one upload hold


@dataclass(frozen=True)
class FieldPrint:
    """One text-bearing field of a record: the keyed digest of its canonical form, the
    whitespace-only digest older indexes hold (looked up, never stored), its near-copy
    sketch and LSH bands (none for a short text)."""

    digest: str
    legacy: str
    sketch: Sketch | None = None
    bands: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordPrint:
    """What the index knows one record by: its fields' prints and its keyed privacy unit."""

    fields: tuple[FieldPrint, ...]
    unit: str
    line: int | None


def _keyed(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def text_fields(record: Record) -> list[str]:
    """Every text-bearing field of a record: its text and each extra field (a template's
    second text, a note); never its label or user id."""
    return [t for t in (record.text, *record.fields.values()) if t and t.strip()]


def keyed_unit(key: bytes, unit: str, scope: str) -> str:
    """A record's privacy unit as the index keeps it: a user id is one id space across the
    tenant's uploads; a record unit is itself, so it is scoped to its upload."""
    name = unit if unit.startswith("user-") else f"{scope} {unit}"
    return _keyed(key, f"unit {name}")[:32]


def fingerprint(
    records: Iterable[Record], key: bytes, scope: str, sketcher: Sketcher | None = None
) -> list[RecordPrint]:
    """Each record's prints under the tenant's key (``sketcher``: also its near-copy
    sketches). Pure computation: run it off the event loop, outside any transaction."""
    out = []
    for r in records:
        prints = []
        for text in text_fields(r):
            canon = canonical_text(text)
            sketch = sketcher.sketch(canon) if sketcher is not None else None
            bands = tuple(sketcher.band_keys(sketch)) if sketcher and sketch else ()
            prints.append(
                FieldPrint(_keyed(key, f"c1 {canon}"), _keyed(key, " ".join(text.split())),
                           sketch, bands)
            )  # fmt: skip
        out.append(RecordPrint(tuple(prints), keyed_unit(key, r.unit, scope), r.line))
    return out


def keyed_digests(records: Iterable[Record], key: bytes) -> set[str]:
    """The keyed canonical digest of every text-bearing field of ``records``."""
    return {f.digest for p in fingerprint(records, key, "") for f in p.fields}


@dataclass(frozen=True)
class Match:
    """Record ``record`` (its position) is, or nearly is, a text of budget ``budget_id``,
    which held it in keyed unit ``unit`` (None: an index made before units were kept)."""

    record: int
    budget_id: str
    unit: str | None
    near: bool


@dataclass(frozen=True)
class Matches:
    """The records of an upload that the tenant's index recognises."""

    items: tuple[Match, ...]
    known: frozenset[str]  # canonical digests already indexed (never inserted again)

    def owners(self) -> Counter[str]:
        """How many records each budget holds (a record counted once per budget)."""
        return Counter(b for _, b in {(m.record, m.budget_id) for m in self.items})

    def records(self, budget_id: str | None = None) -> list[int]:
        return sorted({m.record for m in self.items if budget_id in (None, m.budget_id)})

    def near_count(self) -> int:
        exact = {m.record for m in self.items if not m.near}
        return len({m.record for m in self.items if m.near} - exact)


LOOKUP_CHUNK = 2000  # digests per bounded IN list (SQLite allows 32,766 variables)


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), LOOKUP_CHUNK):
        yield items[i : i + LOOKUP_CHUNK]


def known_digests(session: Session, tenant_id: str, digests: set[str]) -> dict[str, str]:
    """The budget of each of ``digests`` the tenant's index already holds."""
    return {d: b for d, (b, _) in _indexed(session, tenant_id, digests).items()}


def _indexed(
    session: Session, tenant_id: str, digests: set[str]
) -> dict[str, tuple[str, str | None]]:
    found: dict[str, tuple[str, str | None]] = {}
    for chunk in _chunks(sorted(digests)):
        rows = session.execute(
            select(RecordDigest.digest, RecordDigest.budget_id, RecordDigest.unit).where(
                RecordDigest.tenant_id == tenant_id, RecordDigest.digest.in_(chunk)
            )
        )
        found.update((d, (b, u)) for d, b, u in rows)
    return found


def find_matches(session: Session, tenant_id: str, prints: list[RecordPrint]) -> Matches:
    """Every record of ``prints`` the index holds: a field whose canonical (or, in an
    older index, whitespace-normalised) text it has, or a near copy of one (a sketch
    sharing a band whose estimated containment is at least NEAR_CONTAINMENT)."""
    every = {d for p in prints for f in p.fields for d in (f.digest, f.legacy)}
    indexed = _indexed(session, tenant_id, every)
    items = [
        Match(i, *indexed[d], near=False)
        for i, p in enumerate(prints)
        for d in dict.fromkeys(x for f in p.fields for x in (f.digest, f.legacy))
        if d in indexed
    ]
    exact = {m.record for m in items}
    items += _near_matches(session, tenant_id, prints, exact)
    return Matches(tuple(items), frozenset(d for d in indexed if d in every))


def _near_matches(
    session: Session, tenant_id: str, prints: list[RecordPrint], exact: set[int]
) -> list[Match]:
    wanted: dict[str, list[tuple[int, Sketch]]] = {}
    for i, p in enumerate(prints):
        if i in exact:
            continue
        for f in p.fields:
            for band in f.bands if f.sketch is not None else ():
                wanted.setdefault(band, []).append((i, f.sketch))  # type: ignore[arg-type]
    if not wanted:
        return []
    candidates: dict[str, set[int]] = {}
    for chunk in _chunks(sorted(wanted)):
        rows = session.execute(
            select(SketchBand.band, SketchBand.digest).where(
                SketchBand.tenant_id == tenant_id, SketchBand.band.in_(chunk)
            )
        )
        for band, digest in rows:
            candidates.setdefault(digest, set()).update(i for i, _ in wanted[band])
    found: list[Match] = []
    for chunk in _chunks(sorted(candidates)):
        stored = session.scalars(
            select(RecordDigest).where(
                RecordDigest.tenant_id == tenant_id, RecordDigest.digest.in_(chunk)
            )
        )
        for row in stored:
            if row.sketch is None or row.sketch_size is None:
                continue
            theirs = Sketch.from_bytes(row.sketch, row.sketch_size)
            for i in sorted(candidates[row.digest]):
                mine = [f.sketch for f in prints[i].fields if f.sketch is not None]
                if any(containment(s, theirs) >= NEAR_CONTAINMENT for s in mine):
                    found.append(Match(i, row.budget_id, row.unit, near=True))
    return found


def index_records(
    session: Session,
    tenant_id: str,
    prints: list[RecordPrint],
    budget_id: str,
    known: Iterable[str] | None = None,
) -> None:
    """Index ``prints`` as the budget's: each canonical digest with its unit ("*" when
    several units of this upload hold it) and sketch, and the sketch's bands. Digests
    already indexed keep their budget (``known``: those, when the caller has looked them
    up). Bulk inserts."""
    fields: dict[str, FieldPrint] = {}
    units: dict[str, str] = {}
    for p in prints:
        for f in p.fields:
            fields.setdefault(f.digest, f)
            units[f.digest] = p.unit if units.get(f.digest, p.unit) == p.unit else SHARED_UNIT
    have = set(known_digests(session, tenant_id, set(fields)) if known is None else known)
    new = [d for d in sorted(fields) if d not in have]
    rows = [_digest_row(tenant_id, d, budget_id, units[d], fields[d].sketch) for d in new]
    bands = [
        {"tenant_id": tenant_id, "band": b, "digest": d} for d in new for b in set(fields[d].bands)
    ]
    for i in range(0, len(rows), 10 * LOOKUP_CHUNK):
        session.execute(insert(RecordDigest), rows[i : i + 10 * LOOKUP_CHUNK])
    for i in range(0, len(bands), 10 * LOOKUP_CHUNK):
        session.execute(insert(SketchBand), bands[i : i + 10 * LOOKUP_CHUNK])
    session.flush()


def _digest_row(
    tenant_id: str, digest: str, budget_id: str, unit: str, sketch: Sketch | None
) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id, "digest": digest, "budget_id": budget_id, "unit": unit,
        "sketch_size": None if sketch is None else sketch.size,
        "sketch": None if sketch is None else sketch.to_bytes(),
    }  # fmt: skip


def split_units(prints: list[RecordPrint], matches: Matches) -> list[int]:
    """The records whose budget unit this upload spreads over two or more of its own units:
    one user of the budget would then change several units of the upload, and a charge per
    unit of it would not bound what it releases about that user."""
    new_units: dict[str, set[str]] = {}
    holders: dict[str, set[int]] = {}
    for m in matches.items:
        if m.unit is None or m.unit == SHARED_UNIT:
            continue
        new_units.setdefault(m.unit, set()).add(prints[m.record].unit)
        holders.setdefault(m.unit, set()).add(m.record)
    return sorted({r for u, s in new_units.items() if len(s) > 1 for r in holders[u]})


def describe_lines(prints: list[RecordPrint], records: list[int], limit: int = 10) -> str:
    """ "lines 3, 7, 12 and 4 more": where in the caller's own file the records are."""
    lines = [str(prints[i].line) if prints[i].line is not None else f"#{i + 1}" for i in records]
    more = f" and {len(lines) - limit} more" if len(lines) > limit else ""
    return f"line{'s' * (len(lines) != 1)} {', '.join(lines[:limit])}{more}"


def sketcher_for(secret: bytes, tenant_id: str) -> Sketcher:
    return Sketcher(tenant_key(secret, tenant_id))


def describe_sharing(session: Session, owners: Counter[str]) -> str:
    """ "ds_a (tickets, 12 records), ds_b (deleted, 3 records)": never a record's text."""
    parts = []
    for budget_id, count in owners.most_common():
        row = session.get(Dataset, budget_id)
        name = "deleted" if row is None or row.deleted_at is not None else row.name
        parts.append(f"{budget_id} ({name}, {count} record{'s' * (count != 1)})")
    return ", ".join(parts)


def reindex_if_older(session: Session) -> None:
    """An index made by an earlier privlm (whitespace-only digests of the ``text`` column)
    is rebuilt: every private dataset still stored is indexed again in the current form.
    Deleted ones keep their older digests, which lookups still compare."""
    meta = session.get(ServiceMeta, VERSION_KEY)
    if meta is not None and meta.value == INDEX_VERSION:
        return
    for row in session.scalars(
        select(Dataset).where(Dataset.kind == "private", Dataset.deleted_at.is_(None))
    ):
        row.records_indexed = False
    if meta is None:
        session.add(ServiceMeta(key=VERSION_KEY, value=INDEX_VERSION))
    else:
        meta.value = INDEX_VERSION
    session.flush()


def backfill(session: Session, secret: bytes, load: Callable[[Dataset], Any]) -> int:
    """Index the records of private datasets stored before the index (or its current form)
    existed, oldest first, each under its own budget (a record already indexed keeps its
    budget: two ledgers that already exist are never merged). ``load(row)`` reads a
    dataset's records."""
    reindex_if_older(session)
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
            records = load(row)
        except PrivlmError:
            continue  # a file gone missing: nothing to index
        key = tenant_key(secret, row.tenant_id)
        prints = fingerprint(records.records, key, row.id, Sketcher(key))
        index_records(session, row.tenant_id, prints, row.budget_id or row.id)
        row.unit_kind = row.unit_kind or records.unit_kind
        row.records_indexed = True
    return len(rows)
