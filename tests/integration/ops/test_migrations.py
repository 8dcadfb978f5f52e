"""The schema: an upgrade from the previous revision keeps the data and copies the file first;
the migrations build exactly the tables that tables.py declares."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine
from tests.support.cluster import ficc, start_cluster

from ficc.adapters.sql import metering_tables  # noqa: F401  (registers its tables on the metadata)
from ficc.adapters.sql.schema import SCRIPT_LOCATION, head_revision, previous_revision
from ficc.adapters.sql.tables import metadata


def _migrate_to(database: Path, revision: str) -> None:
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", SCRIPT_LOCATION)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _db(state_dir: Path, *args: str) -> dict[str, object]:
    done = ficc("db", *args, state_dir=state_dir)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_upgrade_from_the_previous_revision_keeps_the_data(tmp_path: Path) -> None:
    head = head_revision()
    previous = previous_revision(head)
    assert previous is not None
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    database = state_dir / "ficc.db"
    _migrate_to(database, previous)
    with sqlite3.connect(database) as connection:
        connection.execute(
            "INSERT INTO projects (name, created_at) VALUES ('kept', '2026-01-01 00:00:00')"
        )
        connection.execute(
            "INSERT INTO cluster_settings (key, value) VALUES ('label', ?)", (json.dumps("old"),)
        )
    connection.close()

    assert _db(state_dir, "current") == {"current": previous, "head": head, "at_head": False}
    upgraded = _db(state_dir, "upgrade")
    assert (upgraded["from"], upgraded["to"]) == (previous, head)
    copy = Path(str(upgraded["backup"]))
    assert copy.parent == state_dir
    with sqlite3.connect(copy) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone() == (
            previous,
        )
    connection.close()
    assert _db(state_dir, "current")["at_head"] is True
    again = _db(state_dir, "upgrade")
    assert again["backup"] is None

    cluster = start_cluster(state_dir)
    try:
        projects = cluster.owner().get("/api/v1/projects").json()
        names = {project["name"] for project in projects["projects"]}
        assert "kept" in names
        overview = cluster.owner().get("/api/v1/federation/").json()
        assert overview["identity"]["label"] == "old"
        assert cluster.client().get("/readyz").status_code == 200
        # The start after the upgrade signed the head of the rows written before it.
        verified = ficc("audit-verify", state_dir=state_dir)
        assert verified.returncode == 0, verified.stderr
        report = json.loads(verified.stdout)
        assert (report["intact"], report["signed_heads"]) == (True, 1)
        assert report["signed_through"] >= 1
    finally:
        cluster.stop()


def test_the_migrations_build_what_tables_py_declares(tmp_path: Path) -> None:
    database = tmp_path / "fresh.db"
    _migrate_to(database, "head")
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "render_as_batch": True}
            )
            differences = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_serve_copies_an_outdated_database_before_it_migrates(tmp_path: Path) -> None:
    previous = previous_revision(head_revision())
    assert previous is not None
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    _migrate_to(state_dir / "ficc.db", previous)
    cluster = start_cluster(state_dir)
    try:
        assert cluster.client().get("/readyz").status_code == 200
    finally:
        cluster.stop()
    copies = sorted(state_dir.glob(f"ficc.db.at-{previous}-*.bak"))
    assert len(copies) == 1
    with sqlite3.connect(copies[0]) as connection:
        version = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    connection.close()
    assert version == (previous,)
