"""`ficc federation-*` of pairing and grants: the Federation API from the command line, as the
local owner (`ficc.cli.remote` has the commands that use a pairing)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from ficc.base.errors import FiccError
from ficc.cli.bodies import input_or_flags
from ficc.cli.client import ControlClient
from ficc.cli.exits import fail, handles_errors
from ficc.cli.group import call, cli, emit, forwarding, read_input, state_options

PREFIX = "/api/v1/federation"


def metered_options(command: Any) -> Any:
    """``--tokens``, ``--tokens-per-minute`` and ``--requests-per-minute``: a metered grant."""
    for flag, text in reversed(
        [
            ("--tokens", "Prompt + completion tokens over the grant's life."),
            ("--tokens-per-minute", "Tokens in any rolling 60 seconds."),
            ("--requests-per-minute", "Requests in any rolling 60 seconds."),
        ]
    ):
        command = click.option(flag, type=int, help=text)(command)
    return command


forwarding(
    "federation-status",
    "GET",
    f"{PREFIX}/",
    "Companion, identity, peers, offers, grants and transfers of the project.",
)


@cli.command("federation-configure")
@state_options
@click.option("--input", "input_path", help="JSON body file ('-' for stdin).")
@click.option("--agent-directory", help="Directory for the HyperNet key (created 0700).")
@click.option("--label", help="A name for this cluster, shown to peers.")
@handles_errors
def federation_configure(
    state_dir: Path,
    project: str,
    input_path: str | None,
    agent_directory: str | None,
    label: str | None,
) -> None:
    """Configure and (re)start the companion."""
    body = input_or_flags(input_path, {"--agent-directory": agent_directory, "--label": label})
    if body is None:
        if agent_directory is None:
            raise click.UsageError("give --input FILE or --agent-directory DIR")
        body = {"agent_directory": str(Path(agent_directory).absolute())}
        if label is not None:
            body["label"] = label
    emit(call(state_dir, project, "PUT", f"{PREFIX}/configuration", body))


@cli.command("federation-pair")
@state_options
@click.option("--input", "input_path", help="JSON body file ('-' for stdin).")
@click.option("--service", help="The service cluster's HyperNet ID.")
@click.option("--ticket", help="An address hint for the service cluster.")
@click.option("--scope", "scopes", multiple=True, help="A remote scope to request; repeat.")
@handles_errors
def federation_pair(
    state_dir: Path,
    project: str,
    input_path: str | None,
    service: str | None,
    ticket: str | None,
    scopes: tuple[str, ...],
) -> None:
    """Send an offer to a service cluster."""
    flags = {"--service": service, "--ticket": ticket, "--scope": scopes}
    body = input_or_flags(input_path, flags)
    if body is None:
        if service is None or not scopes:
            raise click.UsageError("give --input FILE, or --service ID and at least one --scope")
        body = {"service": service, "scopes": list(scopes)}
        if ticket is not None:
            body["ticket"] = ticket
    emit(call(state_dir, project, "POST", f"{PREFIX}/offers", body))


@cli.command("federation-approve")
@state_options
@click.argument("offer")
@click.option("--input", "input_path", help='{"revision", "grant"} as JSON (or the flags below).')
@click.option("--scope", "scopes", multiple=True, help="A scope to grant; repeat.")
@click.option("--service", "services", multiple=True, help="A service ID to grant; repeat.")
@click.option("--model", "models", multiple=True, help="A model ID to grant; repeat.")
@click.option("--node", "nodes", multiple=True, help="A node ID to grant; repeat.")
@click.option("--lifetime", type=int, help="Seconds the grant lasts.")
@click.option("--concurrent", type=int, help="Requests in flight at once.")
@click.option("--requests", type=int, help="Requests in all.")
@click.option("--transfer-bytes", type=int, help="Model bytes the peer may acquire.")
@click.option("--request-bytes", type=int, help="Largest request body.")
@click.option("--response-bytes", type=int, help="Largest inference response.")
@click.option("--stop-on-revoke", is_flag=True, help="Revocation also stops created services.")
@metered_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@handles_errors
def federation_approve(
    state_dir: Path,
    project: str,
    offer: str,
    input_path: str | None,
    scopes: tuple[str, ...],
    services: tuple[str, ...],
    models: tuple[str, ...],
    nodes: tuple[str, ...],
    lifetime: int | None,
    concurrent: int | None,
    requests: int | None,
    transfer_bytes: int | None,
    request_bytes: int | None,
    response_bytes: int | None,
    stop_on_revoke: bool,
    tokens: int | None,
    tokens_per_minute: int | None,
    requests_per_minute: int | None,
    yes: bool,
) -> None:
    """Approve an incoming offer with a grant (from --input, or from flags with the offer's
    revision read for you); on a terminal the exact grant is shown for confirmation first."""
    limits = {
        "lifetime": lifetime,
        "concurrent": concurrent,
        "requests": requests,
        "transfer_bytes": transfer_bytes,
        "request_bytes": request_bytes,
        "response_bytes": response_bytes,
        "tokens": tokens,
        "tokens_per_minute": tokens_per_minute,
        "requests_per_minute": requests_per_minute,
    }
    lists = {"scopes": scopes, "services": services, "models": models, "nodes": nodes}
    flags: dict[str, Any] = {f"--{name.replace('_', '-')}": value for name, value in limits.items()}
    flags.update({f"--{name.removesuffix('s')}": value for name, value in lists.items()})
    flags["--stop-on-revoke"] = stop_on_revoke
    with ControlClient(state_dir, project) as client:
        body = input_or_flags(input_path, flags)
        if body is None:
            if not scopes:
                raise click.UsageError("give --input FILE, or at least one --scope")
            grant: dict[str, Any] = {name: list(value) for name, value in lists.items() if value}
            grant.update({name: value for name, value in limits.items() if value is not None})
            if stop_on_revoke:
                grant["stop_on_revoke"] = True
            body = {"revision": _incoming_offer(client, offer)["revision"], "grant": grant}
        if not yes and sys.stdin.isatty() and sys.stderr.isatty():
            _confirm_grant(client, offer, body)
        emit(client.request("POST", f"{PREFIX}/offers/{offer}/approve", body))


def _incoming_offer(client: ControlClient, offer: str) -> dict[str, Any]:
    overview = client.request("GET", f"{PREFIX}/")
    for found in overview.get("offers", []):
        if found.get("id") == offer:
            return dict(found)
    raise click.UsageError(f"no offer {offer} is waiting in this project")


def _confirm_grant(client: ControlClient, offer: str, body: Any) -> None:
    """Show the offer and the grant with every default filled in; ask before approving."""
    from rich.console import Console

    from ficc.cli.output import tables_of
    from ficc.domain.grants import parse_grant

    grant = body.get("grant") if isinstance(body, dict) else None
    try:
        terms = parse_grant(grant).view_json()
    except FiccError as exc:
        fail(exc)
    shown = {
        "offer": {
            key: value
            for key, value in _incoming_offer(client, offer).items()
            if key in ("id", "service", "scopes", "state", "revision", "expires_at")
        },
        "grant": terms,
    }
    console = Console(stderr=True, highlight=False)
    for table in tables_of(shown, title=None, now=_now()):
        console.print(table)
    if not click.confirm("Approve this offer with this grant?", err=True):
        raise click.Abort


def _now() -> datetime:
    return datetime.now(UTC)


@cli.command("federation-finish")
@state_options
@click.argument("offer")
@click.option("--receipt", help="The receipt's digest.")
@click.option("--input", "input_path", help='{"receipt": DIGEST} as JSON.')
@handles_errors
def federation_finish(
    state_dir: Path, project: str, offer: str, receipt: str | None, input_path: str | None
) -> None:
    """Complete the pairing with the exact accepted receipt."""
    if (receipt is None) == (input_path is None):
        raise click.UsageError("give exactly one of --receipt DIGEST or --input FILE")
    body = read_input(input_path) if input_path is not None else {"receipt": receipt}
    emit(call(state_dir, project, "POST", f"{PREFIX}/offers/{offer}/finish", body))


@cli.command("federation-remove")
@state_options
@click.argument("peer", required=False)
@click.option("--offer", help="Discard this unaccepted offer instead of removing a peer.")
@handles_errors
def federation_remove(state_dir: Path, project: str, peer: str | None, offer: str | None) -> None:
    """Remove a peer (revoking its grants), or discard an offer with --offer."""
    if (peer is None) == (offer is None):
        raise click.UsageError("give a PEER or --offer OFFER")
    path = f"{PREFIX}/offers/{offer}" if offer is not None else f"{PREFIX}/peers/{peer}"
    emit(call(state_dir, project, "DELETE", path))


@cli.command("federation-grant")
@state_options
@click.argument("peer")
@click.option("--input", "input_path", required=True, help="The GRANT as JSON.")
@metered_options
@handles_errors
def federation_grant(
    state_dir: Path,
    project: str,
    peer: str,
    input_path: str,
    tokens: int | None,
    tokens_per_minute: int | None,
    requests_per_minute: int | None,
) -> None:
    """Give a paired peer a further exact grant; the metered flags add their limit to it."""
    body = read_input(input_path)
    metered = {
        "tokens": tokens,
        "tokens_per_minute": tokens_per_minute,
        "requests_per_minute": requests_per_minute,
    }
    given = {name: value for name, value in metered.items() if value is not None}
    if given:
        grant = body.get("grant", body) if isinstance(body, dict) else None
        if not isinstance(grant, dict):
            raise click.UsageError("--input must hold the GRANT object")
        both = sorted(set(given) & set(grant))
        if both:
            raise click.UsageError(
                f"--{both[0].replace('_', '-')} and the --input GRANT's {both[0]} disagree: "
                "give it once"
            )
        grant.update(given)
    emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/grants", body))


forwarding(
    "federation-revoke",
    "DELETE",
    f"{PREFIX}/grants/{{grant}}",
    "Revoke a grant; requests on it are refused from now on.",
    "grant",
)


def peer_grant_command(name: str, action: str, grant_help: str, doc: str) -> None:
    """Register the command ``name PEER [--grant GRANT]``: one POST to the peer's ``action``,
    its body ``{"grant": GRANT}`` (``{}`` without one)."""

    def command(state_dir: Path, project: str, peer: str, grant: str | None) -> None:
        body = {} if grant is None else {"grant": grant}
        emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/{action}", body))

    function = click.option("--grant", help=grant_help)(handles_errors(command))
    cli.command(name, help=doc)(state_options(click.argument("peer")(function)))


peer_grant_command(
    "federation-refresh",
    "refresh",
    "Select this remote grant for later requests.",
    "List the grants a peer gives us, or select one.",
)


forwarding(
    "federation-retire",
    "POST",
    f"{PREFIX}/grants/{{grant}}/retire",
    "Delete a revoked or expired grant's operation receipts, keeping a tombstone.",
    "grant",
)


@cli.command("federation-forget")
@state_options
@click.argument("peer")
@click.option(
    "--erase-audit",
    is_flag=True,
    help="Also turn the audit rows naming the peer, its offers and grants into signed tombstones.",
)
@handles_errors
def federation_forget(state_dir: Path, project: str, peer: str, erase_audit: bool) -> None:
    """Delete a removed peer whose grants are all retired."""
    body = {"erase_audit": True} if erase_audit else None
    emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/forget", body))
