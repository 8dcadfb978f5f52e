"""Models beyond listing: the import's wait and progress, and ``ficc model-remove``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ficc.cli.client import ControlClient
from ficc.cli.main import call, cli, emit, handles_errors, state_options
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


@cli.command("model-remove")
@state_options
@click.argument("model")
@handles_errors
def model_remove(state_dir: Path, project: str, model: str) -> None:
    """Delete a model of the project (its files go when no other model shares them)."""
    call(state_dir, project, "DELETE", f"/api/v1/models/{model}")
    emit({"removed": model})
