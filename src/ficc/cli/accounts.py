"""`ficc projects`, `project-create`, `tokens`, `token-create`, `token-revoke`, `login-link`,
`set-password` and `completion`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

import click

from ficc.cli.exits import handles_errors
from ficc.cli.group import call, cli, emit, forwarding, state_options

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


@cli.command("token-create")
@state_options
@click.option("--scope", "scopes", multiple=True, required=True, help="A scope; repeat.")
@click.option("--lifetime", type=int, default=None, help="Lifetime in seconds.")
@click.option("--peer", "peers", multiple=True, help="A peer ID the token may call; repeat.")
@click.option(
    "--service", "services", multiple=True, help="A service ID or route name it may use; repeat."
)
@click.option("--tokens", type=int, default=None, help="Prompt + completion tokens, in all.")
@click.option("--tokens-per-minute", type=int, default=None, help="Tokens in any 60 s.")
@click.option("--requests-per-minute", type=int, default=None, help="Requests in any 60 s.")
@handles_errors
def token_create(
    state_dir: Path,
    project: str,
    scopes: tuple[str, ...],
    lifetime: int | None,
    peers: tuple[str, ...],
    services: tuple[str, ...],
    tokens: int | None,
    tokens_per_minute: int | None,
    requests_per_minute: int | None,
) -> None:
    """Create an API token for --project holding the scopes, optionally restricted to peers
    and services and held to budgets; prints it once."""
    body: dict[str, Any] = {"scopes": list(scopes), "projects": [project], "lifetime": lifetime}
    if peers:
        body["peers"] = list(peers)
    if services:
        body["services"] = list(services)
    for name, value in (
        ("tokens", tokens),
        ("tokens_per_minute", tokens_per_minute),
        ("requests_per_minute", requests_per_minute),
    ):
        if value is not None:
            body[name] = value
    emit(call(state_dir, project, "POST", "/api/v1/tokens", body))


@cli.command("token-usage")
@state_options
@click.argument("token")
@handles_errors
def token_usage(state_dir: Path, project: str, token: str) -> None:
    """A token's usage records (every page) and their totals."""
    records: list[dict[str, Any]] = []
    after: str | None = None
    page: dict[str, Any] = {}
    while True:
        query = urlencode({"limit": 1000, **({"after": after} if after else {})})
        page = call(state_dir, project, "GET", f"/api/v1/tokens/{quote(token)}/usage?{query}")
        records.extend(page["records"])
        after = page.get("next")
        if after is None:
            break
    emit({**page, "records": records, "next": None})


@cli.command("login-link")
@state_options
@handles_errors
def login_link(state_dir: Path, project: str) -> None:
    """Print a one-time, short-lived browser login URL for the local owner."""
    click.echo(call(state_dir, project, "POST", "/api/v1/login-links")["url"])


@cli.command("set-password")
@state_options
@click.option("--password-stdin", is_flag=True, required=True, help="Read the password from stdin.")
@handles_errors
def set_password(state_dir: Path, project: str, password_stdin: bool) -> None:
    """Set the owner's password for browser login (read from stdin)."""
    password = sys.stdin.readline().rstrip("\n")
    call(state_dir, project, "PUT", "/api/v1/owner/password", {"password": password})
    emit({"password_set": True})


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
