"""`ficc models`, `model-add` (the import's wait and progress), `model-remove` and
`example-model`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ficc.cli.client import ControlClient
from ficc.cli.exits import handles_errors
from ficc.cli.group import cli, emit, forwarding, state_options
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


@cli.command("model-add")
@state_options
@click.option("--name", required=True, help="The model's name.")
@click.argument("paths", nargs=-1, required=True)
@handles_errors
def model_add(state_dir: Path, project: str, name: str, paths: tuple[str, ...]) -> None:
    """Import local files as one model (streamed, hashed, stored by content).

    Waits as long as the import takes (a large model hashes and syncs for minutes).
    """
    emit(import_model(state_dir, project, name, [Path(path) for path in paths]))


forwarding("models", "GET", "/api/v1/models", "List the project's models.")


@cli.command("example-model")
@state_options
@handles_errors
def example_model(state_dir: Path, project: str) -> None:
    """Print the path of the small example model the install brings (SmolLM2-135M GGUF)."""
    from ficc.adapters.example_model import example_model_path

    click.echo(str(example_model_path()))
