"""Models beyond listing: the import's wait and progress, and ``ficc model-remove``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ficc.cli.client import ControlClient
from ficc.cli.main import forwarding
from ficc.cli.output import activity, format_bytes


def import_model(state_dir: Path, project: str, name: str, paths: list[Path]) -> Any:
    """Import files as a model, waiting without a deadline: hashing and syncing a large model
    takes as long as the disk needs, and the server finishes it even if we stopped waiting."""
    absolute = [path.absolute() for path in paths]
    total = sum(path.stat().st_size for path in absolute if path.is_file())
    files = f"{len(absolute)} file{'s' if len(absolute) != 1 else ''}"
    body = {"name": name, "paths": [str(path) for path in absolute]}
    with (
        activity(f"importing {name}: {format_bytes(total)} in {files} (hashing, storing)"),
        ControlClient(state_dir, project, timeout_seconds=None) as client,
    ):
        return client.request("POST", "/api/v1/models", body)


forwarding(
    "model-remove",
    "DELETE",
    "/api/v1/models/{model}",
    "Delete a model of the project (its files go when no other model shares them).",
    "model",
    done="removed",
)
