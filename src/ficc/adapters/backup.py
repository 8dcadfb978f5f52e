"""Backup and restore of a state directory: database, keys and blobs, checked on both ends.

A backup is a directory::

    manifest.json       what is inside: format, schema revision, cluster key, label, files,
                        and the audit chain's head (``audit_head``: its seq and digest)
    ficc.db             the database, copied by SQLite's backup API (consistent while serving)
    cluster.key         the FICC cluster key; without it every pairing is lost
    owner.token         the local owner's token
    agent/hypernet.key  the companion's HyperNet key (the HyperNet ID), when one is configured
    store/blobs/…       every model blob, copied and verified against its SHA-256

Restoring writes a new state directory from it, verifies every blob again, puts the HyperNet
key in ``NEW/agent`` (or a directory the operator names) and points the restored database's
companion configuration there. The restored cluster has the same identity (cluster key and
HyperNet ID), pairings, grants and models, and its audit chain with the signed heads: restore
refuses a backup whose audit log does not reach the head its manifest names. Run the original
and the restored cluster at the same time only if you mean to: peers see one identity
answering from two places.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from ficc.adapters.blobstore import BlobStore
from ficc.adapters.hypernet.keys import KEY_FILE_NAME, load_or_create_secret_key
from ficc.adapters.keys import ClusterKey, read_secret_file, write_secret_file
from ficc.adapters.sql.schema import copy_sqlite
from ficc.adapters.state_dir import STATE_DIR_MODE, StateDir
from ficc.base.errors import InvalidInput

BACKUP_FORMAT: Final = 1
MANIFEST: Final = "manifest.json"
AGENT: Final = "agent"
COMPANION_SETTING: Final = "companion"
LABEL_SETTING: Final = "label"


@dataclass(frozen=True)
class BackupSummary:
    directory: Path
    blobs: int
    blob_bytes: int
    hypernet_key: bool
    schema_revision: str | None


def _empty_or_absent(path: Path, *, field: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InvalidInput(f"{field} must be a new or empty directory: {path}", field=field)


def _setting(database: Path, key: str) -> Any:
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT value FROM cluster_settings WHERE key = ?", (key,)
        ).fetchone()
    finally:
        connection.close()
    return None if row is None else json.loads(row[0])


def _revision(database: Path) -> str | None:
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    finally:
        connection.close()
    return None if row is None else str(row[0])


def _audit_head(database: Path) -> dict[str, Any] | None:
    """The audit chain's last row, ``{"seq", "digest"}``; None for an empty log (or a schema
    from before the chain)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT seq, digest FROM audit_log ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        connection.close()
    return None if row is None else {"seq": row[0], "digest": row[1]}


def _check_audit_head(database: Path, head: Any) -> None:
    """The restored log still holds the row the backup's head names, with that digest."""
    if head is None:
        return
    if not isinstance(head, dict):
        raise InvalidInput("the backup's manifest names no valid audit_head", field="from")
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT digest FROM audit_log WHERE seq = ?", (head.get("seq"),)
        ).fetchone()
    finally:
        connection.close()
    if row is None or row[0] != head.get("digest"):
        raise InvalidInput(
            f"the backup's audit log does not reach the head its manifest names "
            f"(row {head.get('seq')})",
            field="from",
        )


def _copy_blobs(source: BlobStore, target: BlobStore) -> tuple[int, int]:
    """Copy every blob, each verified against its address while copied."""
    count = total = 0
    for digest in source.iter_blobs():
        _, size = target.import_file(source.blob_path(digest), digest, field="blob")
        count += 1
        total += size
    return count, total


def backup(state: StateDir, destination: Path, *, now: datetime | None = None) -> BackupSummary:
    """Copy a running or stopped cluster's state into ``destination`` (new or empty)."""
    if not state.database.is_file() or not state.cluster_key.is_file():
        raise InvalidInput(
            f"{state.root} is not an initialised state directory with a SQLite database",
            field="state_dir",
        )
    _empty_or_absent(destination, field="to")
    destination.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
    # An existing empty directory keeps its mode otherwise: the models and the database would
    # sit in a folder every local user may list and read.
    destination.chmod(STATE_DIR_MODE)
    database = destination / state.database.name
    copy_sqlite(state.database, database)
    key = ClusterKey.load(state.cluster_key)
    write_secret_file(destination / state.cluster_key.name, read_secret_file(state.cluster_key))
    if state.owner_token.is_file():
        write_secret_file(destination / state.owner_token.name, read_secret_file(state.owner_token))
    companion = _setting(database, COMPANION_SETTING)
    hypernet_key = False
    if isinstance(companion, dict) and isinstance(companion.get("agent_directory"), str):
        source_key = Path(companion["agent_directory"]) / KEY_FILE_NAME
        if source_key.is_file():
            (destination / AGENT).mkdir(mode=0o700)
            write_secret_file(destination / AGENT / KEY_FILE_NAME, read_secret_file(source_key))
            hypernet_key = True
    blobs, blob_bytes = _copy_blobs(BlobStore(state.store), BlobStore(destination / "store"))
    revision = _revision(database)
    manifest = {
        "format": BACKUP_FORMAT,
        "created_at": (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
        "schema_revision": revision,
        "cluster_key": key.public_text,
        "label": _setting(database, LABEL_SETTING),
        "hypernet_key": hypernet_key,
        "blobs": blobs,
        "blob_bytes": blob_bytes,
        "audit_head": _audit_head(database),
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return BackupSummary(destination, blobs, blob_bytes, hypernet_key, revision)


def read_manifest(source: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{source} holds no readable {MANIFEST}", field="from") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != BACKUP_FORMAT:
        raise InvalidInput(f"{source}/{MANIFEST} is not a FICC backup of format 1", field="from")
    return manifest


def restore(source: Path, state: StateDir, *, agent_directory: Path | None = None) -> BackupSummary:
    """Make a new state directory from a backup; refuses a directory that holds anything."""
    manifest = read_manifest(source)
    _empty_or_absent(state.root, field="state_dir")
    key = ClusterKey.load(source / state.cluster_key.name)
    if key.public_text != manifest.get("cluster_key"):
        raise InvalidInput(
            "the backup's cluster.key is not the one its manifest names", field="from"
        )
    state.create()
    try:
        copy_sqlite(source / state.database.name, state.database)
        _check_audit_head(state.database, manifest.get("audit_head"))
        write_secret_file(state.cluster_key, read_secret_file(source / state.cluster_key.name))
        if (source / state.owner_token.name).is_file():
            write_secret_file(state.owner_token, read_secret_file(source / state.owner_token.name))
        hypernet_key = (source / AGENT / KEY_FILE_NAME).is_file()
        if hypernet_key:
            agent = agent_directory or state.root / AGENT
            _empty_or_absent(agent, field="agent_directory")
            seed = read_secret_file(source / AGENT / KEY_FILE_NAME)
            load_or_create_secret_key(agent, new_seed=lambda: seed)
            _point_companion_at(state.database, agent)
        blobs, blob_bytes = _copy_blobs(BlobStore(source / "store"), BlobStore(state.store))
        if blobs != manifest.get("blobs"):
            raise InvalidInput(
                f"the backup holds {blobs} blobs, its manifest names {manifest.get('blobs')}",
                field="from",
            )
    except BaseException:
        shutil.rmtree(state.root, ignore_errors=True)
        raise
    return BackupSummary(state.root, blobs, blob_bytes, hypernet_key, _revision(state.database))


def _point_companion_at(database: Path, agent: Path) -> None:
    connection = sqlite3.connect(database)
    try:
        row = connection.execute(
            "SELECT value FROM cluster_settings WHERE key = ?", (COMPANION_SETTING,)
        ).fetchone()
        config = json.loads(row[0]) if row is not None else {}
        config["agent_directory"] = str(agent)
        connection.execute(
            "UPDATE cluster_settings SET value = ? WHERE key = ?",
            (json.dumps(config), COMPANION_SETTING),
        )
        connection.commit()
    finally:
        connection.close()
