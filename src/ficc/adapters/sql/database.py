"""The database: SQLite (WAL) by default, PostgreSQL by URL; migrations at open.

SQLite runs on the event loop's own thread. Its statements on a local file take tens of
microseconds, far less than handing each one to a worker thread and back (about a millisecond
per transaction, measured), and FICC serialises its SQLite transactions anyway. PostgreSQL
goes through SQLAlchemy's asyncio engine (psycopg 3).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final, Protocol

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, CursorResult, Engine, Executable, event, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError, ResourceClosedError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from ficc.adapters.metrics import SQLITE_LOCK_WAIT

SQLITE_FILE = "ficc.db"
INITIALISE_LOCK: Final = 0x46494343_0001
"""The PostgreSQL advisory lock held while one process sets a database and its state directory
up; processes sharing a database (an active one and a standby) started at once take turns."""
MIGRATE_LOCK: Final = 0x46494343_0002
"""The PostgreSQL advisory lock each migration's transaction holds: one migrates, the others
then find the schema current."""


def default_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / SQLITE_FILE}"


def normalise_url(url: str) -> str:
    """One spelling per backend: ``sqlite:///FILE`` or ``postgresql+psycopg://…``."""
    if url.startswith("sqlite+aiosqlite:///"):
        return "sqlite:///" + url.removeprefix("sqlite+aiosqlite:///")
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class SqlConnection(Protocol):
    """What repositories use: AsyncConnection has exactly this shape."""

    async def execute(
        self, statement: Executable, parameters: dict[str, Any] | None = None
    ) -> CursorResult[Any]: ...
    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...
    async def close(self) -> None: ...
    def in_transaction(self) -> bool: ...


class HotStatement:
    """A statement every metered request runs, rendered once for SQLite's driver.

    For a small INSERT, SQLAlchemy's work per execution (the compiled cache's lookup, the
    parameters' processing, the result's wrapping) takes about twice what SQLite itself
    does. Rendered with SQLAlchemy's own compiler, the statement's text and its bind
    processors are the ones SQLAlchemy would use; PostgreSQL runs the statement as it is.
    """

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=sqlite.dialect())
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        names = tuple(compiled.positiontup or ())
        positions: list[tuple[str, Callable[[Any], Any] | None]] = []
        for name in names:
            process = compiled._bind_processors.get(name)
            if process is not None and not callable(process):
                raise TypeError(f"{name}: a tuple's bind processors are not rendered here")
            positions.append((name, process))
        self._positions = tuple(positions)
        self._fixed = {
            name: compiled.binds[name].value
            for name in names
            if name in compiled.binds and compiled.binds[name].value is not None
        }
        # What it returns (a SELECT's columns, a RETURNING's): each value read as SQLAlchemy
        # reads it (a JSON column decoded), each row a named tuple, as a Row is named.
        columns = compiled._result_columns
        self._results: tuple[Callable[[Any], Any] | None, ...] = tuple(
            column.type._cached_result_processor(compiled.dialect, None) for column in columns
        )
        self._row: Callable[..., tuple[Any, ...]] | None = (
            collections.namedtuple("HotRow", [column.keyname for column in columns])
            if columns
            else None
        )

    def parameters(self, values: dict[str, Any]) -> list[Any]:
        """The driver's positional parameters for ``values`` by name."""
        given = {**self._fixed, **values}
        return [
            given[name] if process is None else process(given[name])
            for name, process in self._positions
        ]

    def rows(self, fetched: list[tuple[Any, ...]]) -> list[Any]:
        """The driver's rows as SQLAlchemy would give them: named, each value processed."""
        make = self._row
        if make is None:
            return fetched
        results = self._results
        if not any(results):
            return [make(*row) for row in fetched]
        return [
            make(
                *(
                    value if read is None else read(value)
                    for read, value in zip(results, row, strict=True)
                )
            )
            for row in fetched
        ]


async def execute_hot(
    connection: SqlConnection, statement: HotStatement, values: dict[str, Any]
) -> list[Any]:
    """Run ``statement`` with ``values``: straight to SQLite's driver, through SQLAlchemy
    elsewhere. The rows it returns, named tuples (each column by its name, as a ``Row``)."""
    if isinstance(connection, LoopConnection):
        return connection.execute_hot(statement, values)
    assert isinstance(statement.statement, Executable)
    return _rows(await connection.execute(statement.statement, values))


def known(connection: SqlConnection, key: tuple[str, ...]) -> object:
    """What this process committed of ``key`` (see :class:`Committed`); None on PostgreSQL,
    whose database other processes share."""
    return connection.known(key) if isinstance(connection, LoopConnection) else None


def note(connection: SqlConnection, key: tuple[str, ...], value: object) -> None:
    """``key`` holds ``value`` once ``connection``'s transaction commits (SQLite only)."""
    if isinstance(connection, LoopConnection):
        connection.note(key, value)


def _rows(result: CursorResult[Any]) -> list[Any]:
    return list(result) if result.returns_rows else []


class Committed:
    """What this process wrote of some rows and committed (a receipt chain's last row, say),
    so a hot path need not read it back.

    Only SQLite keeps it: one process serves the file and runs its transactions one at a
    time (:class:`WriterLock`), so what its committed transactions wrote is the file's state.
    A value noted in a transaction counts once that transaction commits; one rolled back
    leaves nothing. A caller that finds no value, or one it did not expect, reads the rows.
    """

    def __init__(self) -> None:
        self._values: dict[tuple[str, ...], object] = {}

    def get(self, key: tuple[str, ...]) -> object:
        return self._values.get(key)

    def apply(self, noted: dict[tuple[str, ...], object]) -> None:
        for key, value in noted.items():
            if value is None:
                self._values.pop(key, None)
            else:
                self._values[key] = value


class LoopConnection:
    """A synchronous SQLite connection behind the async interface, on the loop's thread.

    ``keep``: offered the connection when it closes, says whether it took it (to begin the
    next transaction on); one it does not take is closed.
    """

    def __init__(
        self,
        connection: Connection,
        committed: Committed | None = None,
        keep: Callable[[Connection], bool] | None = None,
    ) -> None:
        self._connection = connection
        self._committed = committed if committed is not None else Committed()
        self._noted: dict[tuple[str, ...], object] = {}
        self._keep = keep
        self._open = True
        """Until :meth:`close`: a kept connection then serves another transaction, which a
        statement through this one must never reach."""

    def known(self, key: tuple[str, ...]) -> object:
        """``key``'s value as this transaction sees it: noted in it, else committed (None:
        not known)."""
        if key in self._noted:
            return self._noted[key]
        return self._committed.get(key)

    def note(self, key: tuple[str, ...], value: object) -> None:
        """``key`` holds ``value`` once this transaction commits (None: no longer known)."""
        self._noted[key] = value

    def execute_hot(self, statement: HotStatement, values: dict[str, Any]) -> list[Any]:
        """``statement`` on the driver's own connection, in the transaction SQLAlchemy began
        (pysqlite begins it at the first write either way). Where anything listens to the
        engine's statements (a count, a trace), it goes through SQLAlchemy instead, so that
        every statement is seen."""
        if not self._open:
            raise ResourceClosedError("this transaction's connection is closed")
        connection = self._connection
        if connection._has_events or connection.engine._has_events:
            assert isinstance(statement.statement, Executable)
            return _rows(connection.execute(statement.statement, values))
        driver = connection.connection.driver_connection
        assert driver is not None
        parameters = statement.parameters(values)
        try:
            cursor = driver.execute(statement.sql, parameters)
            try:
                rows: list[tuple[Any, ...]] = cursor.fetchall()
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            # As SQLAlchemy raises it (IntegrityError, OperationalError, …), for the callers.
            raise DBAPIError.instance(statement.sql, parameters, exc, sqlite3.Error) from exc
        return statement.rows(rows)

    async def execute(
        self, statement: Executable, parameters: dict[str, Any] | None = None
    ) -> CursorResult[Any]:
        if not self._open:
            raise ResourceClosedError("this transaction's connection is closed")
        return self._connection.execute(statement, parameters)

    async def commit(self) -> None:
        if not self._open:
            raise ResourceClosedError("this transaction's connection is closed")
        self._connection.commit()
        if self._noted:
            noted, self._noted = self._noted, {}
            self._committed.apply(noted)

    async def rollback(self) -> None:
        self._noted.clear()
        if self._open:
            self._connection.rollback()

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        connection = self._connection
        if connection.in_transaction():
            self._noted.clear()
            connection.rollback()
        if self._keep is None or not self._keep(connection):
            connection.close()

    def in_transaction(self) -> bool:
        return self._open and self._connection.in_transaction()


def _upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATE_LOCK})
    config = Config()
    config.set_main_option("script_location", "ficc.adapters.sql:migrations")
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


class Database:
    """An engine of either kind, with one way to connect, migrate and close."""

    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self._sync: Engine | None = None
        self._async: AsyncEngine | None = None
        self._committed = Committed()
        self._idle: Connection | None = None
        """SQLite: the connection the last transaction ended on, for the next to begin on."""
        if self.url.startswith("sqlite"):
            self._sync = create_sync_engine(self.url)
            event.listen(self._sync, "connect", _sqlite_pragmas)
        else:
            self._async = create_async_engine(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self._sync is not None

    async def connect(self) -> SqlConnection:
        """A connection inside a transaction (begun)."""
        if self._sync is not None:
            # The connection the last transaction left, if any: a pool's checkout and
            # check-in (with its reset) cost more than a small transaction's statements.
            connection, self._idle = self._idle, None
            if connection is None or connection.closed or connection.invalidated:
                connection = self._sync.connect()
            connection.begin()
            return LoopConnection(connection, self._committed, self._keep_idle)
        assert self._async is not None
        async_connection = await self._async.connect()
        await async_connection.begin()
        return async_connection

    async def migrate(self) -> None:
        """Bring the schema to the newest migration; a no-op when it is there already."""
        if self._sync is not None:
            with self._sync.begin() as connection:
                _upgrade(connection)
            return
        assert self._async is not None
        async with self._async.begin() as async_connection:
            await async_connection.run_sync(_upgrade)

    @contextlib.asynccontextmanager
    async def initialising(self) -> AsyncIterator[None]:
        """One process at a time inside: setting a new database up (schema, first rows, the
        state directory's cluster key) is checked-then-created, which two processes started
        at once would both do. A PostgreSQL session advisory lock on a connection of its own;
        nothing on SQLite, whose file one process serves."""
        if self._async is None:
            yield
            return
        async with self._async.connect() as connection:
            lock = {"key": INITIALISE_LOCK}
            await connection.execute(text("SELECT pg_advisory_lock(:key)"), lock)
            await connection.commit()
            try:
                yield
            finally:
                await connection.execute(text("SELECT pg_advisory_unlock(:key)"), lock)
                await connection.commit()

    def _keep_idle(self, connection: Connection) -> bool:
        """Keep ``connection`` (out of any transaction) for the next; one is kept at most."""
        if self._idle is not None or connection.invalidated or connection.in_transaction():
            return False
        self._idle = connection
        return True

    async def dispose(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.close()
        if self._sync is not None:
            self._sync.dispose()
        if self._async is not None:
            await self._async.dispose()


class WriterLock:
    """SQLite has one writer: FICC serialises its transactions instead of retrying on busy."""

    def __init__(self, database: Database) -> None:
        self._lock: asyncio.Lock | None = asyncio.Lock() if database.is_sqlite else None

    async def __aenter__(self) -> None:
        if self._lock is not None:
            if self._lock.locked():
                started = time.perf_counter()
                await self._lock.acquire()
                SQLITE_LOCK_WAIT.observe(time.perf_counter() - started)
            else:
                await self._lock.acquire()
                SQLITE_LOCK_WAIT.observe(0.0)

    async def __aexit__(self, *_: object) -> None:
        if self._lock is not None:
            self._lock.release()
