"""The durable privacy ledger: an append-only record of charges against a budget.

Each charge names its mechanism, parameters, privacy unit and cost: an RDP curve, an
(ε, δ) pair, or both, and, for a data-independent mechanism (DP-SGD's subsampled Gaussian, a
Gaussian, a Laplace), its :class:`~privlm.accounting.events.MechanismEvent`. ``charge`` is
fail-closed: a charge that would take the spent ε above the budget raises
:class:`BudgetExceededError` and records nothing. A charge that is recorded is committed
before ``charge`` returns.

How the spent ε is composed. Two sound statements are computed and the
smaller is reported (the composition satisfies both, so it satisfies the tighter):

1. **RDP for everything:** every charge's RDP curve (an event's own curve included) adds
   order by order (Theorem C.2 of the PMixED paper) and is converted at the best order
   (Theorem C.3); the (ε, δ) parts are added on top by basic composition.
2. **PLD where it applies:** the charges made with ``compose="pld"`` (a run stated with the
   ``prv`` accountant) are composed by their privacy-loss distributions
   (:func:`~privlm.accounting.events.pld_epsilon`) to (ε₁, δ₁); every other RDP curve by
   RDP to (ε₂, δ₂); the (ε, δ) parts to (ε₃, δ₃). The total is (ε₁+ε₂+ε₃, δ₁+δ₂+δ₃) by
   basic composition, minimised over the split δ₁ + δ₂ = δ − δ₃ on a fixed grid. The groups
   interleave adaptively, which basic composition allows for interactive mechanisms too
   (Vadhan & Zhang 2023, *Concurrent composition theorems for DP*; Lyu 2022).

A charge made with the ``rdp`` accountant is composed by RDP only, so a ledger holding one
DP-SGD run reports exactly the ε of that run's ``privacy.json``, for either accountant. A
ledger written before events existed holds no PLD charge and reports what it always did.

Storage is SQLite by default (any SQLAlchemy URL works). Every charge is one transaction
that first takes the write lock (``BEGIN IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE``
elsewhere), re-reads the running totals, checks the budget, appends the charge and updates
the totals, then commits: several processes charging one ledger never overdraw it, and a
crash leaves either the whole charge or none of it.
"""

from __future__ import annotations

import copy
import json
import math
import secrets
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    Column,
    Engine,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection

from privlm.accounting.analysis.conversion import check_delta
from privlm.accounting.composition import PldPart, Spent, composed_spent
from privlm.accounting.curves import RdpCurve
from privlm.accounting.events import MechanismEvent
from privlm.accounting.orders import DEFAULT_ORDERS, as_orders
from privlm.accounting.relations import Relation
from privlm.errors import AccountingError, BudgetExceededError

_metadata = MetaData()

flags_table = Table(
    "privlm_ledger_flags",
    _metadata,
    Column("ledger", String(200), ForeignKey("privlm_ledgers.name"), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

# one row per database: the secret key that names a body of records' default ledger
# (:func:`naming_key`), so the name says nothing about the records to anyone without the file
file_keys_table = Table(
    "privlm_ledger_file_keys",
    _metadata,
    Column("purpose", String(40), primary_key=True),
    Column("value", String(64), nullable=False),
)

ledgers_table = Table(
    "privlm_ledgers",
    _metadata,
    Column("name", String(200), primary_key=True),
    Column("epsilon_budget", Float, nullable=False),
    Column("delta_budget", Float, nullable=False),
    Column("order_budget", Float, nullable=True),
    Column("orders", Text, nullable=False),
    Column("rdp_total", Text, nullable=False),
    Column("approx_epsilon", Float, nullable=False),
    Column("approx_delta", Float, nullable=False),
    Column("n_charges", Integer, nullable=False),
    Column("relation", String(200), nullable=False),
    Column("created_at", String(40), nullable=False),
)

charges_table = Table(
    "privlm_charges",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ledger", String(200), ForeignKey("privlm_ledgers.name"), nullable=False, index=True),
    Column("seq", Integer, nullable=False),
    Column("mechanism", String(200), nullable=False),
    Column("params", Text, nullable=False),
    Column("rdp", Text, nullable=True),
    Column("epsilon", Float, nullable=False),
    Column("delta", Float, nullable=False),
    Column("unit", String(200), nullable=False),
    Column("created_at", String(40), nullable=False),
    UniqueConstraint("ledger", "seq"),
)


@dataclass(frozen=True)
class Budget:
    """A total budget: (ε, δ)-DP, or, with ``order``, (order, ε)-RDP.

    An RDP budget is what SubMix's Algorithm 2 keeps per part (ε_i at a fixed order α);
    its δ is only what the ledger reports conversions at.
    """

    epsilon: float
    delta: float
    order: float | None = None

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise AccountingError(f"a budget's ε must be finite and ≥ 0, got {self.epsilon!r}")
        check_delta(self.delta)
        if self.order is not None and not (self.order > 1 and math.isfinite(self.order)):
            raise AccountingError(f"an RDP budget's order must be > 1, got {self.order!r}")

    def describe(self) -> str:
        if self.order is None:
            return f"ε={self.epsilon:g} at δ={self.delta:g}"
        return f"RDP ε={self.epsilon:g} at order α={self.order:g}"


@dataclass(frozen=True)
class Charge:
    """One cost to record: an RDP curve and/or an (ε, δ) pair, for one mechanism run, and
    the neighbouring relation it is proved for (required, typed: never read from prose, so
    a ledger checks it before any work, as dp-accounting's accountant asks
    ``supports(event)`` before it composes). ``unit`` describes in words what one unit
    changes in the mechanism (default: the relation's name)."""

    mechanism: str
    rdp: RdpCurve | None = None
    epsilon: float = 0.0
    delta: float = 0.0
    unit: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    event: MechanismEvent | None = None  # the mechanism, where it is data-independent
    compose: str = "rdp"  # "pld": compose ``event`` by its PLD (the prv accountant)
    relation: Relation = field(kw_only=True)

    def __post_init__(self) -> None:
        if not self.mechanism:
            raise AccountingError("a charge must name its mechanism")
        if not isinstance(self.relation, Relation):
            raise AccountingError(f"a charge's relation must be a Relation, got {self.relation!r}")
        if not self.unit:
            object.__setattr__(self, "unit", self.relation.value)
        if self.compose not in COMPOSITIONS:
            raise AccountingError(f"compose must be one of {COMPOSITIONS}, got {self.compose!r}")
        if self.compose == "pld" and (self.event is None or self.rdp is None):
            raise AccountingError(
                "a charge composed by PLD needs its mechanism event and its RDP curve (the "
                "ledger keeps both statements and reports the tighter)"
            )
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise AccountingError(f"a charge's ε must be finite and ≥ 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta < 1.0):
            raise AccountingError(f"a charge's δ must lie in [0, 1), got {self.delta!r}")
        if self.rdp is None and self.epsilon == 0 and self.delta == 0:
            raise AccountingError("a charge must carry a cost: an RDP curve or an (ε, δ) pair")


@dataclass(frozen=True)
class ChargeRecord:
    """A charge as stored: what was charged, for which unit, and when."""

    seq: int
    mechanism: str
    params: dict[str, Any]
    rdp: list[float] | None
    epsilon: float
    delta: float
    unit: str
    created_at: str

    @property
    def relation(self) -> Relation:
        """The relation recorded with the charge; for a row written before relations were
        recorded, read from its unit's words (:meth:`Relation.parse`, legacy rows only)."""
        stored = _stored_relation(str(self.params.get("relation", "")))
        return stored if stored is not None else Relation.parse(self.unit)


class RelationError(AccountingError):
    """A charge whose neighbouring relation the ledger does not compose."""


def _stored_relation(text: str) -> Relation | None:
    """A ledger's relation as stored; None for a ledger written before relations were
    enforced (its free text), which keeps composing what it always did."""
    try:
        return Relation(text)
    except ValueError:
        return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


COMPOSITIONS = ("rdp", "pld")
PLD_EVENTS_FLAG, RDP_REST_FLAG = "pld-events", "rdp-without-pld"
OVERDRAWN_FLAG = "overdrawn"  # why the spent ε exceeds the budget (record_overdraft)

_schema_ready: weakref.WeakSet[Engine] = weakref.WeakSet()


def _ensure_schema(engine: Engine) -> None:
    """Create the ledger tables once per engine, not at every ledger opened on it (the
    service opens one per dataset on every listing)."""
    if engine not in _schema_ready:
        _metadata.create_all(engine)
        _schema_ready.add(engine)


def durable_engine(target: str | Path) -> Engine:
    """A SQLAlchemy engine for a path or URL. SQLite runs in WAL mode with full fsync and
    ``BEGIN IMMEDIATE`` transactions (a committed charge survives a crash; concurrent
    writers queue); the service's database uses the same settings."""
    url = str(target)
    if "://" not in url:
        path = Path(url).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    if url.startswith("postgresql"):
        from privlm.extras import require

        require("postgres", "a PostgreSQL database")
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url)


def naming_key(target: str | Path | Engine) -> bytes:
    """The database's secret key for naming ledgers after their records, made on first use
    (32 random bytes). A name derived under it (an HMAC of the records) identifies one body
    of records within this file and is useless outside it."""
    engine = target if isinstance(target, Engine) else durable_engine(target)
    _ensure_schema(engine)
    where = file_keys_table.c.purpose == "ledger-names"
    with engine.begin() as conn:
        found = conn.execute(select(file_keys_table.c.value).where(where)).scalar_one_or_none()
        if found is None:
            found = secrets.token_hex(32)
            conn.execute(insert(file_keys_table).values(purpose="ledger-names", value=found))
    return bytes.fromhex(found)


def ledger_names(target: str | Path | Engine) -> list[str]:
    """The names of the ledgers the database holds, in the order they were made."""
    engine = target if isinstance(target, Engine) else durable_engine(target)
    _ensure_schema(engine)
    with engine.connect() as conn:
        rows = conn.execute(
            select(ledgers_table.c.name).order_by(ledgers_table.c.created_at, ledgers_table.c.name)
        )
        return [r.name for r in rows]


class PrivacyLedger:
    """A named budget and its append-only charges, persisted in a database.

    ``PrivacyLedger(path, name, budget)`` creates the ledger on first use and reopens it
    afterwards; reopening with a different budget or order grid is refused, since a budget
    is not something to change silently. ``relation`` is the neighbouring relation its
    figures are for (:mod:`privlm.accounting.relations`; per unit by default): a charge of
    another relation is refused, recording nothing.
    """

    def __init__(
        self,
        target: str | Path | Engine,
        name: str = "default",
        budget: Budget | None = None,
        orders: tuple[float, ...] = DEFAULT_ORDERS,
        relation: Relation | None = None,
    ) -> None:
        self.name = name
        self.tags: dict[str, str] = {}
        self._engine = target if isinstance(target, Engine) else durable_engine(target)
        _ensure_schema(self._engine)
        with self._engine.begin() as conn:
            row = conn.execute(select(ledgers_table).where(ledgers_table.c.name == name)).first()
            if row is None:
                if budget is None:
                    raise AccountingError(
                        f"ledger {name!r} does not exist yet; give a Budget to create it"
                    )
                grid = tuple(float(a) for a in as_orders(orders))
                if budget.order is not None and budget.order not in grid:
                    grid = tuple(sorted({*grid, float(budget.order)}))
                conn.execute(
                    insert(ledgers_table).values(
                        name=name,
                        epsilon_budget=budget.epsilon,
                        delta_budget=budget.delta,
                        order_budget=budget.order,
                        orders=json.dumps(grid),
                        rdp_total=json.dumps([0.0] * len(grid)),
                        approx_epsilon=0.0,
                        approx_delta=0.0,
                        n_charges=0,
                        relation=(relation or Relation.UNIT).value,
                        created_at=_now(),
                    )
                )
                self.budget, self.orders = budget, grid
            else:
                stored = Budget(row.epsilon_budget, row.delta_budget, row.order_budget)
                if budget is not None and budget != stored:
                    raise AccountingError(
                        f"ledger {name!r} already has budget {stored.describe()}; it cannot "
                        f"be reopened with {budget.describe()}"
                    )
                kept = _stored_relation(row.relation)
                if relation is not None and kept is not None and not kept.accepts(relation):
                    raise RelationError(
                        f"ledger {name!r} composes charges per {kept.describe()}; it cannot be "
                        f"reopened per {relation.describe()}"
                    )
                self.budget = stored
                self.orders = tuple(json.loads(row.orders))

    @classmethod
    def family(
        cls,
        target: str | Path | Engine,
        names: list[str],
        budget: Budget | None = None,
        orders: tuple[float, ...] = DEFAULT_ORDERS,
        relation: Relation | None = None,
    ) -> list[PrivacyLedger]:
        """Ledgers in one database sharing one connection pool, so that
        :func:`charge_together` can charge several of them in one transaction."""
        engine = target if isinstance(target, Engine) else durable_engine(target)
        return [cls(engine, n, budget, orders, relation) for n in names]

    def sibling(
        self, name: str, budget: Budget | None = None, relation: Relation | None = None
    ) -> PrivacyLedger:
        """Another ledger in this one's database (a deployment's beside its dataset's)."""
        return PrivacyLedger(self._engine, name, budget, self.orders, relation)

    def tagged(self, **tags: str) -> PrivacyLedger:
        """The same ledger, writing ``tags`` into the params of every charge made through it
        (the service tags a job's charges with the job's id, to report what it spent)."""
        view = copy.copy(self)
        view.tags = {**self.tags, **tags}
        return view

    # -- reading ----------------------------------------------------------------------------

    def _totals(
        self, conn: Connection, lock: bool = False
    ) -> tuple[NDArray[np.float64], float, float, int]:
        query = select(ledgers_table).where(ledgers_table.c.name == self.name)
        if lock and self._engine.dialect.name != "sqlite":
            query = query.with_for_update()
        row = conn.execute(query).one()
        rdp = np.asarray(json.loads(row.rdp_total), dtype=np.float64)
        return rdp, float(row.approx_epsilon), float(row.approx_delta), int(row.n_charges)

    def _pld_part(self, conn: Connection) -> PldPart | None:
        rows = dict(
            conn.execute(
                select(flags_table.c.key, flags_table.c.value).where(
                    (flags_table.c.ledger == self.name)
                    & flags_table.c.key.in_((PLD_EVENTS_FLAG, RDP_REST_FLAG))
                )
            ).all()
        )
        if PLD_EVENTS_FLAG not in rows:
            return None
        events = tuple(MechanismEvent.from_dict(e) for e in json.loads(rows[PLD_EVENTS_FLAG]))
        return PldPart(events, np.asarray(json.loads(rows[RDP_REST_FLAG]), dtype=np.float64))

    def _epsilon(
        self,
        rdp: NDArray[np.float64],
        approx_eps: float,
        approx_delta: float,
        delta: float,
        pld: PldPart | None = None,
    ) -> Spent:
        return composed_spent(
            self.orders, rdp, approx_eps, approx_delta, delta, pld, self.budget.order
        )

    def spent(self, delta: float | None = None) -> Spent:
        """ε spent so far at δ (default: the budget's δ); for an RDP budget, the RDP at its
        order."""
        d = self.budget.delta if delta is None else check_delta(delta)
        with self._engine.connect() as conn:
            rdp, ae, ad, _ = self._totals(conn)
            pld = self._pld_part(conn)
        return self._epsilon(rdp, ae, ad, d, pld)

    def remaining(self, delta: float | None = None) -> float:
        """ε left before the budget is reached, at δ (default: the budget's δ)."""
        return max(self.budget.epsilon - self.spent(delta).epsilon, 0.0)

    def cost_if_charged(self, charge: Charge) -> Spent:
        """The spent ε at the budget's δ that recording ``charge`` would lead to. Raises
        :class:`RelationError` when the ledger would refuse ``charge``'s relation."""
        with self._engine.connect() as conn:
            self._refuse_other_relation(conn, charge)
            rdp, ae, ad, _ = self._totals(conn)
            pld = self._pld_part(conn)
        return self._after(rdp, ae, ad, charge, pld)[0]

    def fits(self, charge: Charge) -> bool:
        """Whether ``charge`` would be accepted now (the tests ``charge`` itself applies:
        its relation, then its cost)."""
        try:
            return self.cost_if_charged(charge).epsilon <= self.budget.epsilon
        except RelationError:
            return False

    def require_fits(self, charge: Charge, what: str) -> None:
        """Refuse up front, before any work, what ``charge`` would not fit: raises
        :class:`RelationError` for a relation this ledger does not compose, and
        :class:`BudgetExceededError` for a cost over its budget, naming ``what`` (e.g. "this
        DP-SGD run")."""
        try:
            would = self.cost_if_charged(charge)
        except RelationError as exc:
            why = str(exc).removeprefix("refused: ")
            raise RelationError(f"refused before any work ({what}): {why}") from None
        if not would.epsilon <= self.budget.epsilon:
            raise BudgetExceededError(
                f"refused before training: {what} would raise the ε spent on ledger "
                f"{self.name!r} to {would.epsilon:.6g}, over its budget of "
                f"{self.budget.describe()}{self._overdrawn_note()}"
            )

    def overdrawn(self) -> str | None:
        """Why this ledger spent more than its budget (:meth:`record_overdraft`), or None."""
        return self.flag(OVERDRAWN_FLAG)

    def _overdrawn_note(self, conn: Connection | None = None) -> str:
        why = self.overdrawn() if conn is None else self._read_flag(conn, OVERDRAWN_FLAG)
        return "" if why is None else f"; the ledger is overdrawn: {why}"

    def _after(
        self, rdp: NDArray[np.float64], ae: float, ad: float, charge: Charge, pld: PldPart | None
    ) -> tuple[Spent, PldPart | None]:
        """The spent ε once ``charge`` is added, and the PLD part it leaves."""
        extra = np.zeros_like(rdp) if charge.rdp is None else charge.rdp.at(self.orders)
        if charge.compose == "pld":
            assert charge.event is not None
            before = pld or PldPart((), rdp)  # the first PLD charge: all earlier RDP is rest
            pld = PldPart((*before.events, charge.event), before.rdp_rest)
        elif pld is not None:
            pld = PldPart(pld.events, pld.rdp_rest + extra)
        after = self._epsilon(
            rdp + extra, ae + charge.epsilon, ad + charge.delta, self.budget.delta, pld
        )
        return after, pld

    def charges(self) -> list[ChargeRecord]:
        """Every recorded charge, in order."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(charges_table)
                .where(charges_table.c.ledger == self.name)
                .order_by(charges_table.c.seq)
            ).all()
        return [
            ChargeRecord(
                seq=r.seq,
                mechanism=r.mechanism,
                params=json.loads(r.params),
                rdp=None if r.rdp is None else json.loads(r.rdp),
                epsilon=r.epsilon,
                delta=r.delta,
                unit=r.unit,
                created_at=r.created_at,
            )
            for r in rows
        ]

    # -- writing ----------------------------------------------------------------------------

    def charge(self, charge: Charge) -> Spent:
        """Record ``charge`` if the budget allows it, and return the new spent ε.

        Raises :class:`BudgetExceededError`, recording nothing, if it would not fit.
        The charge is committed to the database before this returns.
        """
        with self._engine.begin() as conn:
            return self._apply(conn, charge)

    def record_overdraft(self, charge: Charge, reason: str) -> Spent:
        """Record a cost that was already incurred but does not fit the budget: tokens
        released under a bound since found to understate them, restated. Nothing is
        released by this call; it makes the record true. The spent ε then exceeds the
        budget, so every later charge and every :meth:`require_fits` is refused, and their
        messages carry ``reason`` (kept in the ledger's flags and in :meth:`to_json`)."""
        if not reason:
            raise AccountingError("an overdraft must say why the cost was not charged in time")
        with self._engine.begin() as conn:
            spent = self._apply(conn, charge, check=False)
            before = self._read_flag(conn, OVERDRAWN_FLAG)
            self._write_flag(
                conn, OVERDRAWN_FLAG, reason if before is None else f"{before}; {reason}"
            )
        return spent

    def discard_if_unused(self) -> bool:
        """Remove this ledger if it records no charge (a run that opened it was refused
        before charging anything), so a retry creates it afresh with the budget it asks
        for. A ledger with any charge is history and stays; returns whether it went."""
        with self._engine.begin() as conn:
            used = conn.execute(
                select(func.count()).select_from(charges_table)
                .where(charges_table.c.ledger == self.name)
            ).scalar_one()  # fmt: skip
            if used:
                return False
            conn.execute(delete(flags_table).where(flags_table.c.ledger == self.name))
            conn.execute(delete(ledgers_table).where(ledgers_table.c.name == self.name))
        return True

    def database_is_empty(self) -> bool:
        """Whether this ledger's database holds no ledger at all (e.g. after
        :meth:`discard_if_unused` removed the only one)."""
        with self._engine.connect() as conn:
            return not conn.execute(select(func.count()).select_from(ledgers_table)).scalar_one()

    def count(self) -> int:
        """How many charges are recorded."""
        with self._engine.connect() as conn:
            return self._totals(conn)[3]

    def relation(self) -> Relation | None:
        """The relation this ledger's figures are for (None: a ledger from before relations
        were enforced)."""
        with self._engine.connect() as conn:
            return self._relation(conn)

    def _relation(self, conn: Connection) -> Relation | None:
        row = conn.execute(
            select(ledgers_table.c.relation).where(ledgers_table.c.name == self.name)
        ).one()
        return _stored_relation(row.relation)

    def _check_relation(self, conn: Connection, charge: Charge) -> None:
        """Refuse a charge of another relation; narrow a per-unit ledger to the unit of its
        first record- or user-level charge."""
        mine, theirs = self._refuse_other_relation(conn, charge)
        if mine is not None and mine.narrowed(theirs) is not mine:
            conn.execute(
                update(ledgers_table)
                .where(ledgers_table.c.name == self.name)
                .values(relation=theirs.value)
            )

    def _refuse_other_relation(
        self, conn: Connection, charge: Charge
    ) -> tuple[Relation | None, Relation]:
        """Raise :class:`RelationError` when this ledger does not compose ``charge``'s
        relation; (the ledger's relation, the charge's) otherwise."""
        mine, theirs = self._relation(conn), charge.relation
        if mine is not None and not mine.accepts(theirs):
            raise RelationError(
                f"refused: ledger {self.name!r} composes charges per {mine.describe()}; "
                f"charging {charge.mechanism} per {theirs.describe()} would state one figure "
                "for two promises; nothing was recorded (it needs a ledger of its own)"
            )
        return mine, theirs

    def _apply(self, conn: Connection, charge: Charge, check: bool = True) -> Spent:
        """Check and record ``charge`` inside the caller's (locked) transaction (``check``
        False: only :meth:`record_overdraft`)."""
        extra = None if charge.rdp is None else charge.rdp.at(self.orders)
        rdp, ae, ad, n = self._totals(conn, lock=True)
        self._check_relation(conn, charge)
        pld_before = self._pld_part(conn)
        after, pld = self._after(rdp, ae, ad, charge, pld_before)
        if check and not after.epsilon <= self.budget.epsilon:
            before = self._epsilon(rdp, ae, ad, self.budget.delta, pld_before)
            why = (
                " (its RDP curve is infinite at every order of this ledger)"
                if extra is not None and not np.any(np.isfinite(extra))
                else ""
            )
            raise BudgetExceededError(
                f"refused: charging {charge.mechanism}{why} would raise the ε spent on "
                f"ledger {self.name!r} from {before.epsilon:.6g} to {after.epsilon:.6g}, "
                f"over its budget of {self.budget.describe()}; nothing was recorded"
                f"{self._overdrawn_note(conn)}"
            )
        new_rdp = rdp if extra is None else rdp + extra
        params = {**dict(charge.params), **self.tags, "relation": charge.relation.value}
        if charge.event is not None:
            params.update(dp_event=charge.event.to_dict(), composed_by=charge.compose)
        conn.execute(
            insert(charges_table).values(
                ledger=self.name,
                seq=n + 1,
                mechanism=charge.mechanism,
                params=json.dumps(params, sort_keys=True, default=str),
                rdp=None if extra is None else json.dumps(extra.tolist()),
                epsilon=charge.epsilon,
                delta=charge.delta,
                unit=charge.unit,
                created_at=_now(),
            )
        )
        conn.execute(
            update(ledgers_table)
            .where(ledgers_table.c.name == self.name)
            .values(
                rdp_total=json.dumps(new_rdp.tolist()),
                approx_epsilon=ae + charge.epsilon,
                approx_delta=ad + charge.delta,
                n_charges=n + 1,
            )
        )
        if charge.compose == "pld":  # the events change only with a PLD charge
            assert pld is not None
            events = json.dumps([e.to_dict() for e in pld.events])
            self._write_flag(conn, PLD_EVENTS_FLAG, events)
        if pld is not None:
            self._write_flag(conn, RDP_REST_FLAG, json.dumps(pld.rdp_rest.tolist()))
        return after

    # -- flags --------------------------------------------------------------------------------

    def set_flag(self, key: str, value: str) -> None:
        """Durably record a fact about this ledger's mechanism (e.g. SubMix's STOP)."""
        with self._engine.begin() as conn:
            LedgerTransaction(self, conn).set_flag(key, value)

    @contextmanager
    def transaction(self) -> Iterator[LedgerTransaction]:
        """One transaction holding this ledger's write lock: flags read and written, and
        charges made, through it are committed together when the block ends (or none of
        them, if it raises). A mechanism whose state lives beside its charges (screened
        PMixED's sparse-vector instance) reads and advances that state here, so concurrent
        processes see it one at a time."""
        with self._engine.begin() as conn:
            self._totals(conn, lock=True)
            yield LedgerTransaction(self, conn)

    def _write_flag(self, conn: Connection, key: str, value: str) -> None:
        where = (flags_table.c.ledger == self.name) & (flags_table.c.key == key)
        if conn.execute(select(flags_table.c.key).where(where)).first() is None:
            conn.execute(
                insert(flags_table).values(
                    ledger=self.name, key=key, value=value, created_at=_now()
                )
            )
        else:
            conn.execute(update(flags_table).where(where).values(value=value))

    def flag(self, key: str) -> str | None:
        with self._engine.connect() as conn:
            return self._read_flag(conn, key)

    def _read_flag(self, conn: Connection, key: str) -> str | None:
        row = conn.execute(
            select(flags_table.c.value).where(
                (flags_table.c.ledger == self.name) & (flags_table.c.key == key)
            )
        ).first()
        return None if row is None else str(row.value)

    # -- export -----------------------------------------------------------------------------

    def recorded_rdp(
        self, records: Iterable[ChargeRecord], orders: Iterable[float]
    ) -> NDArray[np.float64]:
        """The RDP the given charges recorded, summed, at each of ``orders`` (0 where a
        charge holds no curve or the ledger's grid lacks the order)."""
        wanted = [float(a) for a in orders]
        total = np.zeros(len(wanted))
        for r in records:
            stored = dict(zip(self.orders, r.rdp or (), strict=False))
            total += np.array([stored.get(a, 0.0) for a in wanted])
        return total

    def spent_by(self, where: Callable[[ChargeRecord], bool], delta: float | None = None) -> Spent:
        """ε at δ of the recorded charges that ``where`` selects, composed as this ledger
        composes them (RDP; the PLD group where it is tighter): e.g. what one job spent of a
        dataset's budget."""
        return self.spent_of([r for r in self.charges() if where(r)], delta)

    def spent_of(self, records: Sequence[ChargeRecord], delta: float | None = None) -> Spent:
        """ε at δ of ``records`` (read from this ledger), composed as :meth:`spent_by`
        composes them, for a caller that has read them already."""
        d = self.budget.delta if delta is None else check_delta(delta)
        rdp, ae, ad = self._sums(records)
        composed = [r for r in records if r.params.get("composed_by") == "pld"]
        pld = None
        if composed:
            events = tuple(MechanismEvent.from_dict(r.params["dp_event"]) for r in composed)
            seqs = {r.seq for r in composed}
            pld = PldPart(events, self._sums([r for r in records if r.seq not in seqs])[0])
        return self._epsilon(rdp, ae, ad, d, pld)

    def _sums(self, records: Sequence[ChargeRecord]) -> tuple[NDArray[np.float64], float, float]:
        """The RDP curve, ε and δ of ``records`` added up."""
        rdp = np.zeros(len(self.orders))
        for r in records:
            if r.rdp is not None:
                rdp = rdp + np.asarray(r.rdp, dtype=np.float64)
        return rdp, sum(r.epsilon for r in records), sum(r.delta for r in records)

    def verify(self) -> bool:
        """Whether the running totals equal the sum of the recorded charges."""
        records = self.charges()
        rdp, eps, dlt = self._sums(records)
        with self._engine.connect() as conn:
            t_rdp, ae, ad, n = self._totals(conn)
            pld = self._pld_part(conn)
        return (
            self._pld_part_matches(records, pld)
            and n == len(records)
            and bool(np.allclose(rdp, t_rdp, rtol=1e-12, atol=0.0))
            and math.isclose(ae, eps, rel_tol=1e-12, abs_tol=1e-15)
            and math.isclose(ad, dlt, rel_tol=1e-12, abs_tol=1e-18)
        )

    def _pld_part_matches(self, records: list[ChargeRecord], pld: PldPart | None) -> bool:
        """The PLD flags hold the events of the PLD charges in order, and the RDP rest the
        sum of every other charge's curve."""
        composed = [r for r in records if r.params.get("composed_by") == "pld"]
        if pld is None:
            return not composed
        events = tuple(MechanismEvent.from_dict(r.params["dp_event"]) for r in composed)
        rest = self._sums([r for r in records if r.params.get("composed_by") != "pld"])[0]
        return events == pld.events and bool(np.allclose(rest, pld.rdp_rest, rtol=1e-12, atol=0))

    def to_json(self) -> dict[str, Any]:
        """The ledger as a JSON-serialisable dict: budget, spent, and every charge."""
        spent = self.spent()
        relation = self.relation()
        return {
            "name": self.name,
            "relation": "as stored before relations were enforced"
            if relation is None
            else relation.describe(),
            "budget": asdict(self.budget),
            "spent": asdict(spent),
            "remaining_epsilon": max(self.budget.epsilon - spent.epsilon, 0.0),
            "overdrawn": self.overdrawn(),
            "orders": list(self.orders),
            "charges": [asdict(c) for c in self.charges()],
        }

    def export_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(json.dumps(self.to_json(), indent=2, allow_nan=True))

    def close(self) -> None:
        self._engine.dispose()


@dataclass(frozen=True)
class LedgerTransaction:
    """What :meth:`PrivacyLedger.transaction` yields: the ledger's flags and charges inside
    one locked transaction. Flags are never exported (:meth:`PrivacyLedger.to_json` lists
    charges only), so a mechanism may keep secret state there."""

    ledger: PrivacyLedger
    conn: Connection

    def charge(self, charge: Charge) -> Spent:
        """As :meth:`PrivacyLedger.charge`, committed with the rest of the transaction."""
        return self.ledger._apply(self.conn, charge)

    def flag(self, key: str) -> str | None:
        return self.ledger._read_flag(self.conn, key)

    def set_flag(self, key: str, value: str) -> None:
        if key in (PLD_EVENTS_FLAG, RDP_REST_FLAG, OVERDRAWN_FLAG):
            raise AccountingError(f"the flag {key!r} is the ledger's own; charges write it")
        self.ledger._write_flag(self.conn, key, value)


def charge_together(items: list[tuple[PrivacyLedger, Charge]]) -> list[Spent]:
    """Charge several ledgers of one :meth:`PrivacyLedger.family` in one transaction:
    all the charges are recorded, or, if any would exceed its budget, none is."""
    if not items:
        return []
    engine = items[0][0]._engine
    if any(ledger._engine is not engine for ledger, _ in items):
        raise AccountingError("charge_together needs ledgers from one PrivacyLedger.family")
    with engine.begin() as conn:
        return [ledger._apply(conn, charge) for ledger, charge in items]
