"""`ficc federation-*`: the Federation API from the command line, as the local owner."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from ficc.base.errors import FiccError
from ficc.cli.client import ControlClient
from ficc.cli.main import (
    EXIT_DEADLINE,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    call,
    cli,
    emit,
    handles_errors,
    read_input,
    state_options,
)
from ficc.services.remote_operations import INVOKE_TIMEOUT_SECONDS, is_streaming

PREFIX = "/api/v1/federation"


def _body_or(input_path: str | None, built: dict[str, Any]) -> Any:
    return read_input(input_path) if input_path is not None else built


@cli.command("federation-status")
@state_options
@handles_errors
def federation_status(state_dir: Path, project: str) -> None:
    """Companion, identity, peers, offers, grants and transfers of the project."""
    emit(call(state_dir, project, "GET", f"{PREFIX}/"))


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
    if input_path is None and agent_directory is None:
        raise click.UsageError("give --input FILE or --agent-directory DIR")
    built: dict[str, Any] = {"agent_directory": str(Path(agent_directory or "").absolute())}
    if label is not None:
        built["label"] = label
    emit(call(state_dir, project, "PUT", f"{PREFIX}/configuration", _body_or(input_path, built)))


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
    if input_path is None and (service is None or not scopes):
        raise click.UsageError("give --input FILE, or --service ID and at least one --scope")
    built: dict[str, Any] = {"service": service, "scopes": list(scopes)}
    if ticket is not None:
        built["ticket"] = ticket
    emit(call(state_dir, project, "POST", f"{PREFIX}/offers", _body_or(input_path, built)))


@cli.command("federation-approve")
@state_options
@click.argument("offer")
@click.option("--input", "input_path", required=True, help='{"revision", "grant"} as JSON.')
@handles_errors
def federation_approve(state_dir: Path, project: str, offer: str, input_path: str) -> None:
    """Approve an incoming offer with a grant."""
    body = read_input(input_path)
    emit(call(state_dir, project, "POST", f"{PREFIX}/offers/{offer}/approve", body))


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
    body = _body_or(input_path, {"receipt": receipt})
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
@handles_errors
def federation_grant(state_dir: Path, project: str, peer: str, input_path: str) -> None:
    """Give a paired peer a further exact grant."""
    body = read_input(input_path)
    emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/grants", body))


@cli.command("federation-revoke")
@state_options
@click.argument("grant")
@handles_errors
def federation_revoke(state_dir: Path, project: str, grant: str) -> None:
    """Revoke a grant; requests on it are refused from now on."""
    emit(call(state_dir, project, "DELETE", f"{PREFIX}/grants/{grant}"))


@cli.command("federation-refresh")
@state_options
@click.argument("peer")
@click.option("--grant", help="Select this remote grant for later requests.")
@handles_errors
def federation_refresh(state_dir: Path, project: str, peer: str, grant: str | None) -> None:
    """List the grants a peer gives us, or select one."""
    body = {} if grant is None else {"grant": grant}
    emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/refresh", body))


@cli.command("federation-retire")
@state_options
@click.argument("grant")
@handles_errors
def federation_retire(state_dir: Path, project: str, grant: str) -> None:
    """Delete a revoked or expired grant's operation receipts, keeping a tombstone."""
    emit(call(state_dir, project, "POST", f"{PREFIX}/grants/{grant}/retire"))


@cli.command("federation-forget")
@state_options
@click.argument("peer")
@handles_errors
def federation_forget(state_dir: Path, project: str, peer: str) -> None:
    """Delete a removed peer whose grants are all retired."""
    emit(call(state_dir, project, "POST", f"{PREFIX}/peers/{peer}/forget"))


@cli.command("federation-request")
@state_options
@click.argument("peer")
@click.option("--input", "input_path", required=True, help='{"operation", "body", "mutation_id"?}')
@click.option("--output", "output_path", help="Write the result here; the file must not exist.")
@handles_errors
def federation_request(
    state_dir: Path, project: str, peer: str, input_path: str, output_path: str | None
) -> None:
    """Send one remote operation through the selected grant (never retried)."""
    body = read_input(input_path)
    output = _exclusive(output_path) if output_path is not None else None
    try:
        with ControlClient(state_dir, project, timeout_seconds=INVOKE_TIMEOUT_SECONDS) as client:
            path = f"{PREFIX}/peers/{peer}/request"
            if (
                isinstance(body, dict)
                and isinstance(body.get("body"), dict)
                and (is_streaming(str(body.get("operation")), body["body"]))
            ):
                with client.stream("POST", path, body) as response:
                    for data in response.iter_bytes():
                        _write(output, data)
            else:
                result = client.request("POST", path, body)
                _write(output, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
    finally:
        if output is not None:
            output.close()


def _exclusive(path: str) -> BinaryIO:
    """Create the output file, refusing one that exists (and touching nothing)."""
    try:
        return open(path, "xb")
    except FileExistsError as exc:
        raise click.UsageError(f"--output: {path} exists already; it was not touched") from exc
    except OSError as exc:
        raise click.UsageError(f"--output: cannot create {path}: {exc.strerror}") from exc


def _write(output: BinaryIO | None, data: bytes) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write(data)
        output.flush()


@cli.command("federation-acquire")
@state_options
@click.argument("peer")
@click.argument("model")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds to wait before pausing.",
)
@handles_errors
def federation_acquire(
    state_dir: Path, project: str, peer: str, model: str, deadline: float
) -> None:
    """Start or resume acquiring a peer's model; pause it on the deadline or Ctrl-C."""
    with ControlClient(state_dir, project) as client:
        try:
            transfer = client.request("POST", f"{PREFIX}/peers/{peer}/models", {"model": model})
        except KeyboardInterrupt:
            # The server may have started the transfer before the answer arrived: find it.
            _pause_started(client, peer, model)
            sys.exit(EXIT_INTERRUPTED)
        try:
            transfer = _follow(client, transfer, deadline)
        except KeyboardInterrupt:
            transfer = _pause_quietly(client, transfer)
            if transfer["state"] == "complete":
                emit(transfer)
                return
            click.echo(json.dumps({"paused": transfer["id"], "reason": "interrupted"}), err=True)
            sys.exit(EXIT_INTERRUPTED)
        if transfer["state"] in ("running", "verifying"):
            transfer = _pause_quietly(client, transfer)
            if transfer["state"] != "complete":
                click.echo(json.dumps({"paused": transfer["id"], "reason": "deadline"}), err=True)
                emit(transfer)
                sys.exit(EXIT_DEADLINE)
        emit(transfer)
        if transfer["state"] != "complete":
            # Paused by FICC itself (stall, peer gone, allowance, disk) or failed: its error
            # says why; run the command again to resume a paused one.
            sys.exit(EXIT_REFUSED)


def _follow(client: ControlClient, transfer: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Show a progress bar on stderr until the transfer leaves ``running`` or time is up."""
    end = time.monotonic() + deadline
    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(transfer["id"], total=transfer["bytes_total"])
        while True:
            progress.update(bar, completed=transfer["bytes_done"])
            if transfer["state"] not in ("running", "verifying") or time.monotonic() >= end:
                return transfer
            time.sleep(min(0.25, max(end - time.monotonic(), 0)))
            transfer = client.request("GET", f"{PREFIX}/transfers/{transfer['id']}")


def _pause_quietly(client: ControlClient, transfer: dict[str, Any]) -> dict[str, Any]:
    """Pause (a second Ctrl-C cannot interrupt it); the transfer as it is afterwards."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(FiccError):
            # Refused only when it completed or failed meanwhile; the GET below shows which.
            client.request("POST", f"{PREFIX}/transfers/{transfer['id']}/pause")
        with contextlib.suppress(FiccError):
            transfer = client.request("GET", f"{PREFIX}/transfers/{transfer['id']}")
    finally:
        signal.signal(signal.SIGINT, previous)
    return transfer


def _pause_started(client: ControlClient, peer: str, model: str) -> None:
    """Pause the running transfer of ``model`` from ``peer``, if the interrupted start began one."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(FiccError):
            overview = client.request("GET", f"{PREFIX}/")
            for transfer in overview.get("transfers", []):
                if (
                    transfer.get("peer") == peer
                    and transfer.get("model") == model
                    and transfer.get("state") in ("running", "verifying")
                ):
                    _pause_quietly(client, transfer)
                    click.echo(
                        json.dumps({"paused": transfer["id"], "reason": "interrupted"}), err=True
                    )
    finally:
        signal.signal(signal.SIGINT, previous)


@cli.command("federation-pause")
@state_options
@click.argument("transfer")
@handles_errors
def federation_pause(state_dir: Path, project: str, transfer: str) -> None:
    """Pause an acquisition, keeping its partial bytes."""
    emit(call(state_dir, project, "POST", f"{PREFIX}/transfers/{transfer}/pause"))
