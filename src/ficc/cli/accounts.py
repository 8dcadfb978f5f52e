"""`ficc projects`, `project-create`, `tokens`, `token-revoke` and `completion`."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from ficc.cli.main import call, cli, emit, forwarding, handles_errors, state_options

SHELLS: Final = ("bash", "zsh", "fish")
COMPLETE_VARIABLE: Final = "_FICC_COMPLETE"


forwarding("projects", "GET", "/api/v1/projects", "List the projects this cluster has.")


@cli.command("project-create")
@state_options
@click.argument("name")
@handles_errors
def project_create(state_dir: Path, project: str, name: str) -> None:
    """Create a project (its name is its ID)."""
    emit(call(state_dir, project, "POST", "/api/v1/projects", {"name": name}))


forwarding(
    "tokens",
    "GET",
    "/api/v1/tokens",
    "List the API tokens (never their secrets): IDs, scopes, projects, state and expiry.",
)


forwarding(
    "token-revoke",
    "DELETE",
    "/api/v1/tokens/{token}",
    "Revoke an API token by its ID; requests with it are refused from now on.",
    "token",
    done="revoked",
)


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script: eval "$(ficc completion bash)" in ~/.bashrc."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:
        raise click.UsageError(f"no completion for {shell}")
    context = click.get_current_context()
    root = context.find_root().command
    click.echo(completer(root, {}, "ficc", COMPLETE_VARIABLE).source())
