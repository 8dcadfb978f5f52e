"""The state directory's layout: one place names every file FICC keeps there."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ficc.adapters.keys import KeyFileError, read_secret_file, write_secret_file

STATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass(frozen=True)
class StateDir:
    root: Path

    @property
    def database(self) -> Path:
        return self.root / "ficc.db"

    @property
    def cluster_key(self) -> Path:
        return self.root / "cluster.key"

    @property
    def owner_token(self) -> Path:
        return self.root / "owner.token"

    @property
    def server_json(self) -> Path:
        return self.root / "server.json"

    @property
    def socket(self) -> Path:
        return self.root / "ficc.sock"

    @property
    def store(self) -> Path:
        """The blob store: blobs by content address, temp and partial files beside them."""
        return self.root / "store"

    @property
    def runtime(self) -> Path:
        """Engine logs and other per-process files."""
        return self.root / "run"

    @property
    def transfers(self) -> Path:
        return self.root / "transfers"

    def create(self) -> None:
        """Make the directory, or take back one that exists: it and its folders become 0700
        and the files FICC writes there 0600, whatever mode they had (group or others could
        otherwise read peer tickets, receipts and the audit log in the database)."""
        self.root.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        for folder in (self.root, self.store, self.runtime, self.transfers):
            folder.mkdir(mode=STATE_DIR_MODE, exist_ok=True)
            folder.chmod(STATE_DIR_MODE)
        for path in self._private_files():
            path.chmod(PRIVATE_FILE_MODE)

    def _private_files(self) -> list[Path]:
        """The database with its journal files, server.json and engine logs that exist."""
        database = self.database
        named = [
            database,
            database.with_name(database.name + "-wal"),
            database.with_name(database.name + "-shm"),
            database.with_name(database.name + "-journal"),
            self.server_json,
        ]
        logs = sorted(entry for entry in self.runtime.iterdir() if entry.is_file())
        return [path for path in named if path.is_file()] + logs

    def write_owner_token(self, token: str) -> None:
        write_secret_file(self.owner_token, (token + "\n").encode("ascii"))

    def read_owner_token(self) -> str:
        return read_secret_file(self.owner_token).decode("ascii").strip()

    def read_private_owner_token(self) -> str | None:
        """The owner token, or None when the file is missing, unreadable or open to others."""
        try:
            return self.read_owner_token()
        except (KeyFileError, ValueError):
            return None

    def write_server_json(self, info: dict[str, Any]) -> None:
        """Atomically, so a reader never sees half a file."""
        temporary = self.server_json.with_suffix(".tmp")
        temporary.write_text(json.dumps(info))
        os.replace(temporary, self.server_json)

    def read_server_json(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.server_json.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None
